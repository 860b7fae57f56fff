package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/testkit"
)

// trivial is the baseline of the operator's cold start: a Knative Service
// of the netcheck image (an HTTP server answering its pod's name, started
// at once), with the operator's scale annotations, no probe of its own
// (Knative's default), beside the operator in ns.
type trivial struct {
	e         *e2e
	ns, name  string
	url, host string
}

// trivialBeside applies the trivial Knative Service in ns with the
// template annotations of svc's, waits until it is Ready, and returns it.
func (e *e2e) trivialBeside(t *testing.T, ns, svc string) *trivial {
	t.Helper()
	ctx := context.Background()
	op, err := e.dyn.Resource(gvrKsvc).Namespace(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann, _, _ := unstructured.NestedStringMap(op.Object, "spec", "template", "metadata", "annotations")
	tv := &trivial{e: e, ns: ns, name: "trivial"}
	e.applyTrivial(t, tv, ann)
	return tv
}

// applyTrivial applies the trivial Knative Service tv with the template
// annotations ann, waits until it is Ready and finds its URL.
func (e *e2e) applyTrivial(t *testing.T, tv *trivial, ann map[string]string) {
	t.Helper()
	ctx := context.Background()
	ns := tv.ns
	obj := map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"name": tv.name, "namespace": ns},
		"spec": map[string]any{"template": map[string]any{
			"metadata": map[string]any{"annotations": ann},
			"spec": map[string]any{"containers": []any{map[string]any{
				"image": e.c.Images["netcheck"], "args": []any{"serve", ":8080"},
				"ports": []any{map[string]any{"containerPort": int64(8080)}}}}}}}}
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Apply(ctx, string(b)); err != nil {
		t.Fatalf("applying the trivial Knative Service: %v", err)
	}
	testkit.Eventually(t, 3*time.Minute, "Knative Service trivial Ready", func(ctx context.Context) (bool, error) {
		k, err := e.dyn.Resource(gvrKsvc).Namespace(ns).Get(ctx, tv.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	tv.url, tv.host = e.clusterLocal(t, ns, tv.name)
}

// clusterLocal returns the URL of Traefik's cluster-local entry point
// (web-internal, the pod's port 8001) and the Host that routes it to
// Knative Service svc in ns.
func (e *e2e) clusterLocal(t *testing.T, ns, svc string) (url, host string) {
	t.Helper()
	ctx := context.Background()
	ingress, err := e.podNames(ctx, "traefik", "app=traefik")
	if err != nil || len(ingress) == 0 {
		t.Fatalf("Traefik's pod: %v %v", ingress, err)
	}
	tp, err := e.cs.CoreV1().Pods("traefik").Get(ctx, ingress[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + tp.Status.PodIP + ":8001/", svc + "." + ns + ".svc.cluster.local"
}

// firstAnswer waits for zero pods, then times a GET through the ingress
// until its first 200 (the activator holds it while a pod starts), with
// the pod's steps meanwhile.
func (tv *trivial) firstAnswer(t *testing.T) (time.Duration, *podSteps) {
	t.Helper()
	tv.e.waitZero(t, tv.ns, tv.name)
	req, err := http.NewRequest(http.MethodGet, tv.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = tv.host
	steps := tv.e.watchPodSteps(t, tv.ns, tv.name)
	defer steps.stop()
	t0 := time.Now()
	steps.add("request sent")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("the trivial Knative Service at zero pods: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the trivial Knative Service at zero pods answered %d", resp.StatusCode)
	}
	d := time.Since(t0)
	steps.add("answered")
	return d, steps
}

// podSteps watches the pods of svc in ns from its start and records when
// each step of a cold start was first seen, relative to t0: the pod
// object, scheduled, each container running, Ready.
type podSteps struct {
	mu    sync.Mutex
	t0    time.Time
	steps map[string]time.Duration
	pod   string // the first pod seen
	stop  func()
}

func (e *e2e) watchPodSteps(t *testing.T, ns, svc string) *podSteps {
	t.Helper()
	return e.watchPodStepsOf(t, ns, "serving.knative.dev/service="+svc)
}

// watchPodStepsOf is watchPodSteps of the pods selector selects.
func (e *e2e) watchPodStepsOf(t *testing.T, ns, selector string) *podSteps {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ps := &podSteps{t0: time.Now(), steps: map[string]time.Duration{}}
	done := make(chan struct{})
	ps.stop = func() { cancel(); w.Stop(); <-done }
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
				continue
			}
			ps.seen("pod object")
			ps.mu.Lock()
			if ps.pod == "" {
				ps.pod = p.Name
			}
			ps.mu.Unlock()
			for _, c := range p.Status.Conditions {
				if c.Status == corev1.ConditionTrue {
					switch c.Type {
					case corev1.PodScheduled:
						ps.seen("scheduled")
					case corev1.PodReady:
						ps.seen("Ready")
					}
				}
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.State.Running != nil {
					ps.seen(c.Name + " running")
				}
			}
		}
	}()
	return ps
}

func (ps *podSteps) seen(step string) { ps.at(step, time.Now()) }

// at records step at when, unless it was seen before.
func (ps *podSteps) at(step string, when time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.steps[step]; !ok {
		ps.steps[step] = when.Sub(ps.t0)
	}
}

// has says whether step was seen.
func (ps *podSteps) has(step string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	_, ok := ps.steps[step]
	return ok
}

// add records a step seen now by the caller.
func (ps *podSteps) add(step string) { ps.seen(step) }

// String lists the steps in the order they were seen.
func (ps *podSteps) String() string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	names := make([]string, 0, len(ps.steps))
	for n := range ps.steps {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return ps.steps[names[i]] < ps.steps[names[j]] })
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s +%s", n, ps.steps[n].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// operatorSteps adds to ps the operator's own steps, from the timestamps
// of its container's log (the node shares the test's clock: one machine):
// listening, the API discovery warm, and the ConfigMap's event received (its
// delivery line's time less the delivery's duration, which counts from the
// request's arrival), its sender authenticated (the TokenReview) and the
// event answered. The delivery line is written
// after the answer: it waits up to 10 s for it.
func (e *e2e) operatorSteps(t *testing.T, ns string, ps *podSteps) {
	t.Helper()
	ps.mu.Lock()
	pod := ps.pod
	ps.mu.Unlock()
	if pod == "" {
		return
	}
	var lines []opLogLine
	err := testkit.Poll(context.Background(), 10*time.Second, func(ctx context.Context) (bool, error) {
		b, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "operator"}).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		lines = parseOpLog(b)
		return slices.ContainsFunc(lines, func(l opLogLine) bool { return l.Msg == "delivery" && l.Reason == "update ConfigMap" }), nil
	})
	if err != nil {
		t.Logf("the operator's log of pod %s: %v", pod, err)
	}
	for _, l := range lines {
		switch l.Msg {
		case "serverless operator listening":
			ps.at("operator listening (its log)", l.Time)
		case "restarted pods": // the reconciler's, before its Event and status
			ps.at("pods restarted (its log)", l.Time)
		case "API discovery warm":
			ps.at("API discovery warm (its log)", l.Time)
		case "delivery":
			if l.Reason != "update ConfigMap" {
				t.Logf("pod %s: a delivery before the ConfigMap's (not a step): %s %s", pod, l.Reason, l.Result)
				continue
			}
			if d, err := time.ParseDuration(l.Duration); err == nil {
				ps.at("event received (its log)", l.Time.Add(-d))
				if a, err := time.ParseDuration(l.AuthTime); err == nil {
					ps.at("sender authenticated (its log)", l.Time.Add(-d+a))
				}
			}
			ps.at("event answered (its log)", l.Time)
		}
	}
}

// opLogLine is what operatorSteps reads of a line of the operator's JSON log.
type opLogLine struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	Duration string    `json:"duration"`
	AuthTime string    `json:"authTime"`
	Reason   string    `json:"reason"`
	Result   string    `json:"result"`
}

func parseOpLog(b []byte) []opLogLine {
	var out []opLogLine
	for _, line := range strings.Split(string(b), "\n") {
		var l opLogLine
		if json.Unmarshal([]byte(line), &l) == nil && !l.Time.IsZero() {
			out = append(out, l)
		}
	}
	return out
}

// stepMedians is each step's median over runs, in the order of the
// medians, with the number of runs it was seen in when not all.
func stepMedians(runs []*podSteps) string {
	by := map[string][]time.Duration{}
	for _, ps := range runs {
		ps.mu.Lock()
		for n, d := range ps.steps {
			by[n] = append(by[n], d)
		}
		ps.mu.Unlock()
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return median(by[names[i]]) < median(by[names[j]]) })
	var parts []string
	for _, n := range names {
		p := fmt.Sprintf("%s +%s", n, median(by[n]).Round(time.Millisecond))
		if len(by[n]) != len(runs) {
			p += fmt.Sprintf(" (%d of %d)", len(by[n]), len(runs))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// hubCounters sums, over the hub's pods, the counters of their /metrics
// (port 8081, the pod IPs reached from the host) whose names are given.
func (e *e2e) hubCounters(t *testing.T, names ...string) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	pods, err := e.cs.CoreV1().Pods("opzero-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opzero-hub"})
	if err != nil {
		t.Fatal(err)
	}
	sum := map[string]float64{}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.Status.PodIP + ":8081/metrics")
		if err != nil {
			t.Logf("the hub's metrics (%s): %v", p.Name, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && slices.Contains(names, f[0]) {
				v, _ := strconv.ParseFloat(f[1], 64)
				sum[f[0]] += v
			}
		}
	}
	return sum
}
