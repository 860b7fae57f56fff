package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/spanlog"
	"github.com/opzero/opzero/internal/testkit"
)

// scaleOut is max-scale 3 under load on real Knative: internal/testop's
// manifests (`opzero manifests --operator ./internal/testop` with
// TESTOP_SCALEOUT: containerConcurrency 1, the default max-scale 3, spans
// in the pods' logs; the default wiring, the hub) applied unchanged;
// ConfigWatchers whose reconcile takes 50 ms, each sent many update events
// at once in random order through Knative's cluster-local ingress
// (Traefik, then the activator or the revision's pods), with the token of
// the allowed sender (the hub's service account). Knative adds
// pods up to 3 and no more; no two reconciles of one key overlap across the
// pods (their spans, read from the pods' logs); events of a key held by
// another pod are forwarded to it; every key's last reconcile starts after
// its last event was sent.
func (e *e2e) scaleOut(t *testing.T) {
	const svc, objects, perObject, senders = "testop", 40, 15, 24
	ctx := context.Background()
	ns := e.namespace(t, "e2e-scaleout")
	t.Setenv("TESTOP_SCALEOUT", "1") // for `opzero manifests`, which runs testop to describe it
	e.deploy(t, ns, "--operator", "./internal/testop", "--idle", "6s")
	e.ready(t, ns, gvrKsvc, 1)
	t.Logf("wiring %s: %s", hubWiring.name, e.wired(t, hubWiring, ns, svc, 0))
	t.Logf("the revision's first pod gone %s after Ready", e.waitZero(t, ns, svc).Round(time.Second))

	cws := make([]*unstructured.Unstructured, objects)
	for i := range cws {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8spatterns.io/v1", "kind": "ConfigWatcher",
			"metadata": map[string]any{"name": fmt.Sprintf("c%03d", i), "namespace": ns},
			"spec":     map[string]any{"configMap": "external", "podSelector": map[string]any{"a": "b"}},
		}}
		var err error
		if cws[i], err = e.dyn.Resource(gvrConfigWatcher).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Their creates, through the hub, start the operator; the
	// load starts at zero pods again, so that every pod it sees runs then.
	testkit.Eventually(t, 3*time.Minute, "every ConfigWatcher reconciled once", func(ctx context.Context) (bool, error) {
		l, err := e.dyn.Resource(gvrConfigWatcher).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		done := 0
		for _, o := range l.Items {
			if n, _, _ := unstructured.NestedInt64(o.Object, "status", "restarts"); n > 0 {
				done++
			}
		}
		return done == objects, fmt.Errorf("%d of %d", done, objects)
	})
	t.Logf("the creates reconciled; back at zero pods %s later", e.waitZero(t, ns, svc).Round(time.Second))
	t1 := time.Now()
	testkit.Eventually(t, 3*time.Minute, "no pod left, terminating ones included", func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + svc})
		return err == nil && len(l.Items) == 0, err
	})
	t.Logf("the last pod gone %s later", time.Since(t1).Round(time.Second))

	if senders := e.allowedSenders(t, ns, svc); !slices.Equal(senders, []string{hubSender}) {
		t.Fatalf("--allowed-senders=%s: want the hub's account alone, %s", strings.Join(senders, ","), hubSender)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts(manifests.HubNamespace).CreateToken(ctx, manifests.HubName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{fmt.Sprintf("opzero:%s:%s", ns, svc)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	url, host := e.clusterLocal(t, ns, svc)

	// Watch the revision's pods while the load runs.
	t0 := time.Now()
	stop := make(chan struct{})
	var watchWG sync.WaitGroup
	var podMu sync.Mutex
	seen, most := map[string]bool{}, 0
	var timeline []string // pods running and going, from the start of the load
	running0 := map[string]bool{}
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		for {
			if l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + svc}); err == nil {
				running := 0
				podMu.Lock()
				now := map[string]bool{}
				for _, p := range l.Items {
					seen[p.Name] = true
					if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
						running++
						now[p.Name] = true
					}
				}
				for p := range now {
					if !running0[p] {
						timeline = append(timeline, fmt.Sprintf("%s running at %s", p[len(p)-5:], time.Since(t0).Round(100*time.Millisecond)))
					}
				}
				for p := range running0 {
					if !now[p] {
						timeline = append(timeline, fmt.Sprintf("%s going at %s", p[len(p)-5:], time.Since(t0).Round(100*time.Millisecond)))
					}
				}
				running0 = now
				most = max(most, running)
				podMu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()

	var order []int
	for i := range cws {
		for range perObject {
			order = append(order, i)
		}
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders}, Timeout: time.Minute}
	var mu sync.Mutex
	lastSent := make([]time.Time, objects)
	lastAnswer := make([]string, objects) // of the event sent last, for a key reconciled too early
	codes := map[int]int{}
	type handOff struct {
		i  int
		at time.Time // answered
	}
	var handOffs []handOff
	forwarded, handedOff, failed := 0, 0, 0
	next := make(chan int)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				b, _ := cws[i].MarshalJSON()
				ev, err := cloudevent.NewObjectEvent(cloudevent.Reference, cloudevent.Update, b, "configwatchers")
				if err != nil {
					t.Error(err)
					return
				}
				var resp *http.Response
				sent := time.Now()
				for try := 0; try < 20; try++ { // what a Knative sender retries: 5xx and 429
					req, err := cloudevent.NewRequest(ctx, url, ev, false)
					if err != nil {
						t.Error(err)
						return
					}
					req.Host = host
					req.Header.Set("Authorization", "Bearer "+token)
					if resp, err = client.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
							break
						}
					}
					time.Sleep(200 * time.Millisecond)
				}
				mu.Lock()
				if sent.After(lastSent[i]) {
					lastSent[i] = sent
					if resp != nil {
						lastAnswer[i] = fmt.Sprintf("%d %s=%q %s=%q, answered %s", resp.StatusCode, serverless.ResultHeader, resp.Header.Get(serverless.ResultHeader),
							serverless.HolderHeader, resp.Header.Get(serverless.HolderHeader), time.Now().Format(time.StampMicro))
					}
				}
				if resp == nil {
					failed++
				} else {
					codes[resp.StatusCode]++
					if resp.Header.Get(serverless.HolderHeader) != "" {
						forwarded++
					}
					if strings.Contains(resp.Header.Get(serverless.ResultHeader), "handed off") {
						handedOff++
						handOffs = append(handOffs, handOff{i, time.Now()})
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, i := range order {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(t0)
	loadEnd := time.Now()
	// A 200 "handed off" (the key's Lease held by another pod, marked
	// dirty) is reconciled by the holder when it releases the Lease, up to
	// LeaseKeepIdle after the key's last run there: after the answer. The
	// logs are read once every Lease is released, so those reruns are in
	// them (read at once, they were not: a key's last event, handed off in
	// the load's last second, had no reconcile after it, 1 run in 9).
	testkit.Eventually(t, 30*time.Second, "the operator's Leases released", func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: lease.OperatorLabel})
		return err == nil && len(l.Items) == 0, fmt.Errorf("%v: %d Leases", err, len(l.Items))
	})
	released := time.Since(loadEnd)
	time.Sleep(500 * time.Millisecond)    // the last spans from the containers' stderr into their log files
	logs := e.allOperatorLogs(t, ns, svc) // before the pods go
	close(stop)
	watchWG.Wait()
	t.Logf("%d events in %s by %d senders: answers %v (%d failed), %d forwarded to the key's holder, %d handed off; pods seen %d, at most %d running at once",
		len(order), took.Round(time.Millisecond), senders, codes, failed, forwarded, handedOff, len(seen), most)
	t.Logf("pods: %s", strings.Join(timeline, "; "))
	if codes[http.StatusOK] != len(order) {
		t.Errorf("answers %v: want %d x 200", codes, len(order))
	}
	if most != 3 {
		t.Errorf("at most %d pods running at once; want 3 (max-scale)", most)
	}
	if forwarded == 0 {
		t.Error("no event was forwarded to the pod holding its key")
	}

	// The spans, from every pod's log, in spanlog's format (a pod for a pid).
	file := filepath.Join(t.TempDir(), "spans")
	var b strings.Builder
	pods := map[string]int{}
	for pod, log := range logs {
		s := bufio.NewScanner(strings.NewReader(log))
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			f := strings.Fields(s.Text())
			if len(f) != 5 || f[0] != "testop-span" {
				continue
			}
			if f[3] != pod {
				t.Errorf("span of pod %s in the log of %s", f[3], pod)
			}
			if _, ok := pods[pod]; !ok {
				pods[pod] = len(pods) + 1
			}
			fmt.Fprintf(&b, "%s %s %d %s\n", f[1], f[2], pods[pod], f[4])
		}
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := spanlog.Read(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	total, late, afterLoad, missedAtOnce, perPod := 0, 0, 0, 0, map[int]int{}
	for i, cw := range cws {
		rs := runs[ns+"/"+cw.GetName()]
		total += len(rs)
		for _, r := range rs {
			perPod[r.PID]++
		}
		// Logs read at the load's end (as before) would hold only the
		// reconciles that started by then.
		var early []time.Time
		for _, r := range rs {
			if !r.Start.After(loadEnd) {
				early = append(early, r.Start)
			}
		}
		if len(early) == 0 || early[len(early)-1].Before(lastSent[i]) {
			missedAtOnce++
			t.Logf("%s: read at the load's end, the logs had no reconcile after its last event (answer %s)", cw.GetName(), lastAnswer[i])
		}
		// Reconciled after the load: a hand-off's rerun, or an event the
		// load did not send (the hub's, of the status writes).
		if len(rs) > 0 && rs[len(rs)-1].Start.After(loadEnd) {
			afterLoad++
		}
		if len(rs) > 0 && rs[len(rs)-1].Start.After(loadEnd) && strings.Contains(lastAnswer[i], "handed off") {
			t.Logf("%s: last event sent %s, answer %s; its last reconcile started %s after the load's last answer", cw.GetName(),
				lastSent[i].Format(time.StampMicro), lastAnswer[i], rs[len(rs)-1].Start.Sub(loadEnd).Round(time.Millisecond))
		}
		if len(rs) == 0 || rs[len(rs)-1].Start.Before(lastSent[i]) {
			late++
			var last []string
			for _, r := range rs[max(0, len(rs)-3):] {
				last = append(last, fmt.Sprintf("pod %d [%s, %s]", r.PID, r.Start.Format(time.StampMicro), r.End.Format(time.StampMicro)))
			}
			t.Logf("%s: last event sent %s, answer %s; last reconciles %s", cw.GetName(), lastSent[i].Format(time.StampMicro), lastAnswer[i], strings.Join(last, ", "))
		}
	}
	// A handed-off event's reconcile: the key's first run that starts
	// after the answer (the holder's rerun for the mark, at its release
	// of the Lease), and how long after the answer.
	var rerun []time.Duration
	afterEnd := 0
	for _, h := range handOffs {
		for _, r := range runs[ns+"/"+cws[h.i].GetName()] {
			if r.Start.After(h.at) {
				rerun = append(rerun, r.Start.Sub(h.at))
				if r.Start.After(loadEnd) {
					afterEnd++
				}
				break
			}
		}
	}
	if len(rerun) > 0 {
		t.Logf("handed-off events: the key's next reconcile started after the answer by %s; %d of them after the load's last answer", durations(rerun), afterEnd)
	}
	o := spanlog.Overlaps(runs, t.Logf)
	var spread []string
	for pod, n := range pods {
		spread = append(spread, fmt.Sprintf("%s: %d", pod, perPod[n]))
	}
	sort.Strings(spread)
	t.Logf("%d reconciles in %d of %d pods' logs (%s); %d overlapping reconciles of one key; %d keys whose last reconcile started before their last event was sent; %d keys reconciled last after the load's last answer (the Leases released %s after it); %d keys without a reconcile after their last event in logs read at the load's end",
		total, len(pods), len(logs), strings.Join(spread, ", "), o, late, afterLoad, released.Round(time.Millisecond), missedAtOnce)
	if o != 0 {
		t.Errorf("%d overlapping reconciles of one key across pods", o)
	}
	if late != 0 {
		t.Errorf("%d keys' last reconcile started before their last event was sent", late)
	}
	if len(pods) < 2 {
		t.Errorf("reconciles ran in %d pods; want them spread over the pods", len(pods))
	}
	if missing := len(seen) - len(logs); missing > 0 {
		t.Errorf("%d of the %d pods seen had gone before their logs were read: their spans are missing", missing, len(seen))
	}
	t.Logf("scaled to zero %s after the load", e.waitZero(t, ns, svc).Round(time.Second))
}

// allOperatorLogs returns the operator container's log of every pod of
// svc, terminating ones too, by pod name.
func (e *e2e) allOperatorLogs(t *testing.T, ns, svc string) map[string]string {
	t.Helper()
	l, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string]string{}
	for _, p := range l.Items {
		out, err := e.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "operator"}).DoRaw(context.Background())
		if err != nil {
			t.Logf("logs of %s: %v", p.Name, err)
			continue
		}
		logs[p.Name] = string(out)
	}
	return logs
}
