package lease_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// The engine's instances run alone under the operator's sole Lease
// (--max-scale > 1 without --per-key-leases): these tests are the per-key
// ones of scaleout_test.go for that case.

// TestAloneTakesOneLease: one instance at max-scale 2 reconciles 20 keys
// under the sole Lease alone: no per-key Lease is written, and the sole
// Lease is deleted once idle.
func TestAloneTakesOneLease(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	w := watchLeases(t, ns)
	in := startInstance(t, ns, filepath.Join(t.TempDir(), "spans"), nil, "--max-scale=2")
	for i := range 20 {
		cw := newCW(t, ns, "x"+string(rune('a'+i)), "converge")
		if resp, body := send(t, in.url, cw); resp == nil || resp.StatusCode != 200 {
			t.Fatalf("event: %v %s", resp, body)
		}
	}
	testkit.Eventually(t, 15*time.Second, "no lease left once idle", func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil })
	var added []string
	for _, ev := range w.drain() {
		if ev.Type == watch.Added {
			le := ev.Object.(*coordinationv1.Lease)
			added = append(added, le.Name)
		}
	}
	if len(added) != 1 || added[0] != lease.SoleName("testop") {
		t.Fatalf("leases created for 20 keys: %v, want only the sole lease", added)
	}
}

// TestAloneHolderKilledIsTakenOver: an instance reconciling alone hangs in
// a reconcile and is SIGKILLed. Meanwhile another instance does not
// reconcile the key: it answers 503 (the sender delivers again) and asks
// the holder to step down. Once the sole Lease has expired, the event
// delivered again is reconciled there; no two reconciles overlapped and
// no Lease is left.
func TestAloneHolderKilledIsTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	const duration = 3 * time.Second
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	args := []string{"--max-scale=2", "--lease-duration=" + duration.String()}
	holder := startInstance(t, ns, spans, []string{"TESTOP_HANG=1"}, args...)
	other := startInstance(t, ns, spans, nil, args...)
	cw := newCW(t, ns, "x", "converge")
	hang(t, holder, ns, cw)
	if ls := leases(t, ns); ls[0].Name != lease.SoleName("testop") {
		t.Fatalf("the holder's lease: %s, want the sole lease", ls[0].Name)
	}
	req, _ := event(t, other.url, cw)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("event to the other instance while the holder runs alone: %d, want 503 with Retry-After", resp.StatusCode)
	}
	if ls := leases(t, ns); len(ls) != 1 || ls[0].Annotations[lease.WantedAnnotation] == "" {
		t.Fatalf("the sole lease not marked wanted: %+v", ls)
	}
	killed := time.Now()
	holder.Kill()
	if resp, body := send(t, other.url, cw); resp == nil || resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Opzero-Result"), "reconciled") {
		t.Fatalf("the event delivered again: %v %s, want 200 reconciled", resp, body)
	}
	got := &v1.ConfigWatcher{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cw), got); err != nil || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("after: observedGeneration %d, generation %d, %v", got.Status.ObservedGeneration, got.Generation, err)
	}
	testkit.Eventually(t, 15*time.Second, "no lease left", func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil })
	if o := overlaps(t, readSpans(t, spans, map[int]time.Time{holder.Cmd.Process.Pid: killed})); o != 0 {
		t.Fatalf("%d overlapping reconciles", o)
	}
}

// TestAloneStepsDown: an instance reconciles alone (a slow reconcile of
// a); another gets an event for b. It does not reconcile b before the
// holder has stepped down, which waits for a's reconcile to end (then
// deletes the sole Lease): b's reconcile starts after a's ended.
func TestAloneStepsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	w := watchLeases(t, ns)
	args := []string{"--max-scale=2", "--lease-duration=3s"}
	holder := startInstance(t, ns, spans, nil, args...)
	other := startInstance(t, ns, spans, nil, args...)
	a, b := newCW(t, ns, "a", "slow"), newCW(t, ns, "b", "converge")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, body := send(t, holder.url, a); resp == nil || resp.StatusCode != 200 {
			t.Errorf("a's event: %v %s", resp, body)
		}
	}()
	testkit.Eventually(t, 10*time.Second, "the holder runs alone", func(context.Context) (bool, error) {
		ls := leases(t, ns)
		return len(ls) == 1 && ls[0].Name == lease.SoleName("testop"), nil
	})
	if resp, body := send(t, other.url, b); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("b's event (delivered again while refused): %v %s", resp, body)
	}
	<-done
	runs := readSpans(t, spans, nil)
	if len(runs[ns+"/a"]) != 1 || len(runs[ns+"/b"]) != 1 {
		t.Fatalf("reconciles: a %d, b %d, want 1 each", len(runs[ns+"/a"]), len(runs[ns+"/b"]))
	}
	ra, rb := runs[ns+"/a"][0], runs[ns+"/b"][0]
	if rb.PID != other.Cmd.Process.Pid || rb.Start.Before(ra.End) {
		t.Fatalf("b reconciled by pid %d from %s; a by pid %d until %s: want b by the other instance after a", rb.PID, rb.Start, ra.PID, ra.End)
	}
	holderID := ""
	var sawWanted, sawDeleted bool
	for _, ev := range w.drain() {
		le := ev.Object.(*coordinationv1.Lease)
		if le.Name != lease.SoleName("testop") {
			continue
		}
		if holderID == "" {
			holderID = ptrOr(le.Spec.HolderIdentity)
		}
		switch {
		case ptrOr(le.Spec.HolderIdentity) != holderID:
		case ev.Type == watch.Deleted:
			sawDeleted = sawWanted
		case le.Annotations[lease.WantedAnnotation] != "":
			sawWanted = true
		}
	}
	if !sawWanted || !sawDeleted {
		t.Fatalf("the holder's sole lease marked wanted: %v, then deleted: %v", sawWanted, sawDeleted)
	}
	testkit.Eventually(t, 15*time.Second, "no lease left", func(context.Context) (bool, error) { return len(leases(t, ns)) == 0, nil })
}

// TestAloneHandsOverWithout503: an instance reconciles alone (a slow
// reconcile of a, 2 s); another gets an event for b, once, no retry. It
// asks the holder to step down and waits for the sole Lease to be let go
// rather than answering 503 (a draining instance lets go as soon as its
// runs end): the one delivery is answered 200, b reconciled after a.
func TestAloneHandsOverWithout503(t *testing.T) {
	if testing.Short() {
		t.Skip("processes")
	}
	ns := testenv.Get(t).Namespace(t)
	spans := filepath.Join(t.TempDir(), "spans")
	args := []string{"--max-scale=2", "--lease-duration=15s"}
	holder := startInstance(t, ns, spans, nil, args...)
	other := startInstance(t, ns, spans, nil, args...)
	a, b := newCW(t, ns, "a", "slow"), newCW(t, ns, "b", "converge")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, body := send(t, holder.url, a); resp == nil || resp.StatusCode != 200 {
			t.Errorf("a's event: %v %s", resp, body)
		}
	}()
	testkit.Eventually(t, 10*time.Second, "the holder runs alone", func(context.Context) (bool, error) {
		ls := leases(t, ns)
		return len(ls) == 1 && ls[0].Name == lease.SoleName("testop"), nil
	})
	req, _ := event(t, other.url, b)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Opzero-Result"), "reconciled") {
		t.Fatalf("b's one delivery while the holder ran alone: %d %q, want 200 reconciled once the holder let go", resp.StatusCode, resp.Header.Get("Opzero-Result"))
	}
	<-done
	runs := readSpans(t, spans, nil)
	ra, rb := runs[ns+"/a"][0], runs[ns+"/b"][0]
	if rb.PID != other.Cmd.Process.Pid || rb.Start.Before(ra.End) {
		t.Fatalf("b reconciled by pid %d from %s; a by pid %d until %s: want b by the other instance after a", rb.PID, rb.Start, ra.PID, ra.End)
	}
}

// leaseWatch collects a namespace's Lease events.
type leaseWatch struct {
	w watch.Interface
}

func watchLeases(t *testing.T, ns string) *leaseWatch {
	wc, err := client.NewWithWatch(testenv.Get(t).Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &coordinationv1.LeaseList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &leaseWatch{w: w}
}

// drain returns the events received so far.
func (lw *leaseWatch) drain() []watch.Event {
	var out []watch.Event
	for {
		select {
		case ev := <-lw.w.ResultChan():
			if ev.Type != watch.Error && ev.Object != nil {
				out = append(out, ev)
			}
		case <-time.After(200 * time.Millisecond):
			return out
		}
	}
}
