package cluster

import (
	"context"
	"fmt"
	"net/http"
	"sort"
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
	return tv
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
// until its first 200 (the activator holds it while a pod starts).
func (tv *trivial) firstAnswer(t *testing.T) time.Duration {
	t.Helper()
	tv.e.waitZero(t, tv.ns, tv.name)
	req, err := http.NewRequest(http.MethodGet, tv.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = tv.host
	t0 := time.Now()
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("the trivial Knative Service at zero pods: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the trivial Knative Service at zero pods answered %d", resp.StatusCode)
	}
	return time.Since(t0)
}

// podSteps watches the pods of svc in ns from its start and records when
// each step of a cold start was first seen, relative to t0: the pod
// object, scheduled, each container running, Ready.
type podSteps struct {
	mu    sync.Mutex
	t0    time.Time
	steps map[string]time.Duration
	stop  func()
}

func (e *e2e) watchPodSteps(t *testing.T, ns, svc string) *podSteps {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + svc})
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

func (ps *podSteps) seen(step string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, ok := ps.steps[step]; !ok {
		ps.steps[step] = time.Since(ps.t0)
	}
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
