package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/devenv/balancer"
	"github.com/opzero/opzero/internal/spanlog"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

// instance is one engine process of the scripted operator.
type instance struct {
	*testkit.Child
	url string
}

// forwarding, in startInstance's env, has the instance record its own URL
// on the Leases it holds, so that the others forward it its keys' events.
const forwarding = "OPZERO_ADVERTISE_ADDRESS=self"

// startInstance starts an instance whose Leases go to namespace ns, on a
// free port (another if the port was taken meanwhile).
func startInstance(t *testing.T, ns, spans string, env []string, args ...string) *instance {
	t.Helper()
	in := &instance{}
	testkit.OnFreePort(t, func(port int) (err error) {
		in.url = fmt.Sprintf("http://127.0.0.1:%d", port)
		cmd := exec.Command(testop, append([]string{"--mode=serverless", "--insecure-no-auth"}, args...)...)
		cmd.Env = append(append(os.Environ(), "KUBECONFIG="+testenv.Get(t).Kubeconfig, "PORT="+strconv.Itoa(port), "TESTOP_SPANS="+spans, "POD_NAMESPACE="+ns), env...)
		for i, kv := range cmd.Env {
			if kv == forwarding {
				cmd.Env[i] = "OPZERO_ADVERTISE_ADDRESS=" + in.url
			}
		}
		in.Child, err = testkit.StartChild(t, cmd, in.url+"/healthz", 20*time.Second)
		return err
	})
	return in
}

func newCW(t *testing.T, ns, name, script string) *v1.ConfigWatcher {
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ConfigWatcherSpec{ConfigMap: script, PodSelector: map[string]string{"a": "b"}}}
	if err := testenv.Get(t).Client.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	return cw
}

// event is the Reference-mode update an ApiServerSource sends for cw.
func event(t *testing.T, url string, cw *v1.ConfigWatcher) (*http.Request, error) {
	obj := cw.DeepCopy()
	obj.SetGroupVersionKind(v1.GroupVersion.WithKind("ConfigWatcher"))
	b, _ := json.Marshal(obj)
	ev, err := cloudevent.NewObjectEvent(cloudevent.Reference, cloudevent.Update, b, "configwatchers")
	if err != nil {
		t.Fatal(err)
	}
	return cloudevent.NewRequest(context.Background(), url, ev, false)
}

// send delivers cw's event to url, retrying (for up to 10 s) what a
// Knative sender retries: 5xx and 429.
func send(t *testing.T, url string, cw *v1.ConfigWatcher) (resp *http.Response, body string) {
	err := testkit.Poll(context.Background(), 10*time.Second, func(context.Context) (bool, error) {
		req, err := event(t, url, cw)
		if err != nil {
			return false, err
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		resp, body = r, string(b)
		return r.StatusCode < 500 && r.StatusCode != http.StatusTooManyRequests, nil
	})
	if err != nil && resp == nil {
		t.Errorf("sending %s: %v", cw.Name, err)
	}
	return resp, body
}

func readSpans(t *testing.T, file string, deaths map[int]time.Time) map[string][]*spanlog.Span {
	runs, err := spanlog.Read(file, deaths)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func overlaps(t *testing.T, runs map[string][]*spanlog.Span) int {
	return spanlog.Overlaps(runs, t.Logf)
}

// hang has holder (started with TESTOP_HANG) take cw's Lease and hang in
// its reconcile; the event is never answered.
func hang(t *testing.T, holder *instance, ns string, cw *v1.ConfigWatcher) {
	t.Helper()
	go func() {
		if req, err := event(t, holder.url, cw); err == nil {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	testkit.Eventually(t, 10*time.Second, "the holder takes the lease", func(context.Context) (bool, error) {
		ls := leases(t, ns)
		return len(ls) == 1 && ls[0].Spec.HolderIdentity != nil, nil
	})
}

func leases(t *testing.T, ns string) []coordinationv1.Lease {
	list := &coordinationv1.LeaseList{}
	if err := testenv.Get(t).Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestFourInstancesNeverOverlap: 4 engine processes behind a round-robin
// balancer, 200 objects, 20 events each in random order across instances.
// No two reconciles of a key overlap (a span log shared by the processes),
// every object's last reconcile started after its last event was sent, and
// no Lease is left. Twice: the instances mark each other's Leases, or
// forward each other the events of the keys they hold.
func TestFourInstancesNeverOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	t.Run("marking", func(t *testing.T) { fourInstances(t, nil) })
	t.Run("forwarding", func(t *testing.T) { fourInstances(t, []string{forwarding}) })
}

func fourInstances(t *testing.T, instanceEnv []string) {
	const objects, perObject, senders = 200, 20, 32
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	var urls []string
	for range 4 {
		urls = append(urls, startInstance(t, ns, spans, instanceEnv, "--max-scale=4", "--lease-duration=5s").url)
	}
	lb := balancer.New(urls...)
	front := httptest.NewServer(lb)
	defer front.Close()

	cws := make([]*v1.ConfigWatcher, objects)
	var order []int
	for i := range cws {
		cws[i] = newCW(t, ns, fmt.Sprintf("c%03d", i), "converge")
		for range perObject {
			order = append(order, i)
		}
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	var mu sync.Mutex
	lastSent := make([]time.Time, objects)
	codes := map[int]int{}
	handedOff, forwarded := 0, 0
	next := make(chan int)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sent := time.Now()
				resp, _ := send(t, front.URL, cws[i])
				mu.Lock()
				if sent.After(lastSent[i]) {
					lastSent[i] = sent
				}
				if resp != nil {
					codes[resp.StatusCode]++
					if strings.Contains(resp.Header.Get("Opzero-Result"), "handed off") {
						handedOff++
					}
					if resp.Header.Get("Opzero-Holder") != "" {
						forwarded++
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
	t.Logf("answers %v, %d handed off, %d forwarded; served per instance: %d %d %d %d", codes, handedOff, forwarded,
		lb.Served(urls[0]), lb.Served(urls[1]), lb.Served(urls[2]), lb.Served(urls[3]))
	if codes[200] != objects*perObject {
		t.Fatalf("answers %v: want %d x 200", codes, objects*perObject)
	}
	if handedOff == 0 && instanceEnv == nil || forwarded == 0 && instanceEnv != nil {
		t.Fatal("no event was handed off or forwarded: the instances never contended, the test proves nothing")
	}
	// Hand-offs are answered at once; the holders' follow-ups finish soon
	// after, and a Lease kept while warm is deleted once idle.
	if err := testkit.Poll(context.Background(), 30*time.Second, func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil }); err != nil {
		for _, le := range leases(t, ns) {
			t.Logf("left: %s holder %v renewed %v annotations %v", le.Name, ptrOr(le.Spec.HolderIdentity), le.Spec.RenewTime, le.Annotations)
		}
		t.Fatalf("no lease left: %v", err)
	}

	runs := readSpans(t, spans, nil)
	if o := overlaps(t, runs); o != 0 {
		t.Fatalf("%d overlapping reconciles of one key", o)
	}
	pids, total, late := map[int]bool{}, 0, 0
	for i, cw := range cws {
		rs := runs[ns+"/"+cw.Name]
		total += len(rs)
		for _, r := range rs {
			pids[r.PID] = true
		}
		if len(rs) == 0 || rs[len(rs)-1].Start.Before(lastSent[i]) {
			late++
			t.Errorf("%s: last reconcile did not start after its last event (%s)", cw.Name, lastSent[i].Format(time.StampMicro))
		}
	}
	t.Logf("%d events -> %d reconciles by %d processes", objects*perObject, total, len(pids))
	if len(pids) != 4 {
		t.Fatalf("reconciles ran in %d processes, want all 4", len(pids))
	}
}

// TestKilledHolderIsTakenOver: an instance dies holding a key's Lease
// mid-reconcile; the event another instance acknowledged meanwhile is
// reconciled by that instance within the lease duration + 1 s of the kill,
// and no Lease is left.
func TestKilledHolderIsTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	const duration = 3 * time.Second
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	args := []string{"--max-scale=2", "--lease-duration=" + duration.String(), "--per-key-leases"} // the per-key protocol; running alone: alone_test.go
	holder := startInstance(t, ns, spans, []string{"TESTOP_HANG=1"}, args...)
	other := startInstance(t, ns, spans, nil, args...)
	cw := newCW(t, ns, "x", "converge")

	hang(t, holder, ns, cw)
	resp, _ := send(t, other.url, cw)
	if resp == nil || resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Opzero-Result"), "handed off") {
		t.Fatalf("event to the other instance: %v, want 200 handed off", resp)
	}
	if ls := leases(t, ns); len(ls) != 1 || ls[0].Annotations["opzero.dev/dirty"] == "" {
		t.Fatalf("lease not marked: %+v", ls)
	}
	killed := time.Now()
	holder.Kill()

	got := &v1.ConfigWatcher{}
	testkit.Eventually(t, 2*duration+5*time.Second, "the other instance reconciles", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), got)
		return err == nil && got.Status.ObservedGeneration == got.Generation, err
	})
	took := time.Since(killed)
	t.Logf("completed %s after the kill (lease %s)", took.Round(time.Millisecond), duration)
	if took > duration+time.Second {
		t.Fatalf("completed %s after the kill: want within the lease duration + 1 s (%s)", took, duration+time.Second)
	}
	testkit.Eventually(t, 5*time.Second, "no lease left", func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil })
	runs := readSpans(t, spans, map[int]time.Time{holder.Cmd.Process.Pid: killed})
	if o := overlaps(t, runs); o != 0 {
		t.Fatalf("%d overlapping reconciles", o)
	}
}

// TestHolderKilledMidForward: an instance forwards an event to the holder
// of its key's Lease, which is SIGKILLed before it answers. The forwarder
// falls back to marking the Lease (answered 200 "handed off"), takes the
// dead holder's Lease over at its expiry and reconciles: nothing is lost.
func TestHolderKilledMidForward(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	const duration = 3 * time.Second
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	args := []string{"--max-scale=2", "--lease-duration=" + duration.String(), "--per-key-leases"} // the per-key protocol; running alone: alone_test.go
	holder := startInstance(t, ns, spans, []string{"TESTOP_HANG=1", forwarding}, args...)
	other := startInstance(t, ns, spans, []string{forwarding}, args...)
	cw := newCW(t, ns, "x", "converge")
	hang(t, holder, ns, cw)
	if ls := leases(t, ns); ls[0].Annotations["opzero.dev/holder-address"] != holder.url {
		t.Fatalf("the holder's address on its Lease: %q, want %s", ls[0].Annotations["opzero.dev/holder-address"], holder.url)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		req, _ := event(t, other.url, cw)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- resp
	}()
	// The forwarded event waits in the holder's queue behind the hung reconcile.
	time.Sleep(500 * time.Millisecond)
	select {
	case resp := <-answered:
		t.Fatalf("answered before the holder died: %v", resp)
	default:
	}
	killed := time.Now()
	holder.Kill()
	resp := <-answered
	if resp == nil || resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Opzero-Result"), "handed off") {
		t.Fatalf("event to the other instance: %v, want 200 handed off (the fall-back to the mark)", resp)
	}
	got := &v1.ConfigWatcher{}
	testkit.Eventually(t, 2*duration+5*time.Second, "the other instance reconciles", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), got)
		return err == nil && got.Status.ObservedGeneration == got.Generation, err
	})
	if took := time.Since(killed); took > duration+time.Second {
		t.Fatalf("completed %s after the kill: want within the lease duration + 1 s", took)
	}
	testkit.Eventually(t, 5*time.Second, "no lease left", func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil })
	if o := overlaps(t, readSpans(t, spans, map[int]time.Time{holder.Cmd.Process.Pid: killed})); o != 0 {
		t.Fatalf("%d overlapping reconciles", o)
	}
}

// TestSweepHealsAnAbandonedLease: the holder dies and nobody else heard of
// the key; a sweep after the expiry reconciles it and removes the Lease.
func TestSweepHealsAnAbandonedLease(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	args := []string{"--max-scale=2", "--lease-duration=2s", "--per-key-leases"} // the per-key protocol
	holder := startInstance(t, ns, spans, []string{"TESTOP_HANG=1"}, args...)
	other := startInstance(t, ns, spans, nil, args...)
	cw := newCW(t, ns, "x", "converge")
	hang(t, holder, ns, cw)
	holder.Kill()
	testkit.Eventually(t, 10*time.Second, "the dead holder's lease expires", func(context.Context) (bool, error) {
		ls := leases(t, ns)
		return len(ls) == 1 && ls[0].Spec.RenewTime != nil && ls[0].Spec.LeaseDurationSeconds != nil &&
			time.Now().After(ls[0].Spec.RenewTime.Add(time.Duration(*ls[0].Spec.LeaseDurationSeconds)*time.Second)), nil
	})

	req, _ := cloudevent.NewRequest(context.Background(), other.url, cloudevent.NewPing("/apis/v1/namespaces/"+ns+"/pingsources/sweep", nil), false)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Opzero-Result"), "1 expired leases") {
		t.Fatalf("sweep: %d %q, want 200 naming 1 expired lease", resp.StatusCode, resp.Header.Get("Opzero-Result"))
	}
	got := &v1.ConfigWatcher{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cw), got); err != nil || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("after the sweep: observedGeneration %d, generation %d, %v", got.Status.ObservedGeneration, got.Generation, err)
	}
	// The sweep's reconcile keeps the Lease while warm (--lease-keep-idle),
	// then deletes it.
	testkit.Eventually(t, 10*time.Second, "no lease left after the sweep", func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil })
}

// TestOneInstanceTakesNoLease: without --max-scale above 1, serialization
// stays in memory: no Lease is ever created.
func TestOneInstanceTakesNoLease(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &coordinationv1.LeaseList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	in := startInstance(t, ns, filepath.Join(t.TempDir(), "spans"), nil)
	cw := newCW(t, ns, "x", "converge")
	for range 3 {
		if resp, body := send(t, in.url, cw); resp == nil || resp.StatusCode != 200 {
			t.Fatalf("event: %v %s", resp, body)
		}
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Error {
			t.Fatalf("a Lease was written with one instance: %s %v", ev.Type, ev.Object)
		}
	case <-time.After(500 * time.Millisecond):
	}
}

// TestHandOffSurvivesBothInstances: with durable time, the instance that
// acknowledged an event for a held key records a Wakeup for the Lease's
// expiry. The holder and that instance are both killed (scale to zero);
// the wakeup source delivers at the expiry to a fresh instance, which takes
// the expired Lease over and reconciles. Nothing is left behind.
func TestHandOffSurvivesBothInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	lb := balancer.New()
	front := httptest.NewServer(lb)
	defer front.Close()
	args := []string{"--max-scale=2", "--lease-duration=3s", "--wakeup-sink=" + front.URL, "--wakeup-namespace=" + ns, "--per-key-leases"} // the per-key protocol
	holder := startInstance(t, ns, spans, []string{"TESTOP_HANG=1"}, args...)
	marker := startInstance(t, ns, spans, nil, args...)
	cw := newCW(t, ns, "x", "converge")
	hang(t, holder, ns, cw)
	if resp, body := send(t, marker.url, cw); resp == nil || resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Opzero-Result"), "handed off") {
		t.Fatalf("event to the marker: %v %s, want 200 handed off", resp, body)
	}
	wakeups := &v1alpha1.WakeupList{}
	if err := env.Client.List(context.Background(), wakeups, client.InNamespace(ns)); err != nil || len(wakeups.Items) != 1 {
		t.Fatalf("wakeups after the hand-off: %d %v, want 1 (the look at the expiry)", len(wakeups.Items), err)
	}
	for _, in := range []*instance{holder, marker} {
		in.Kill()
	}
	lb.SetBackends(startInstance(t, ns, spans, nil, args...).url)
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, wakeup.NewSource(c, wakeup.SourceOptions{Namespace: ns}).Run)

	got := &v1.ConfigWatcher{}
	testkit.Eventually(t, 15*time.Second, "a fresh instance reconciles", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), got)
		return err == nil && got.Status.ObservedGeneration == got.Generation, err
	})
	testkit.Eventually(t, 5*time.Second, "nothing left", func(ctx context.Context) (bool, error) {
		err := env.Client.List(ctx, wakeups, client.InNamespace(ns))
		return err == nil && len(wakeups.Items) == 0 && len(leases(t, ns)) == 0, err
	})
}

func ptrOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
