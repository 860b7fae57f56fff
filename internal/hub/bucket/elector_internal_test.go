package bucket

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// TestOfIsConsistent: every key has one bucket; growing the buckets from
// n to n+1 moves keys only into the new bucket, about 1/(n+1) of them;
// the buckets are about even.
func TestOfIsConsistent(t *testing.T) {
	const keys = 20000
	for n := 1; n <= 8; n++ {
		count := make([]int, n)
		moved := 0
		for k := range keys {
			key := fmt.Sprintf("ns-%d/sub-%d", k%37, k)
			b := Of(key, n)
			count[b]++
			if nb := Of(key, n+1); nb != b {
				moved++
				if nb != n {
					t.Fatalf("%s moved from bucket %d to %d when %d buckets became %d: only to the new one", key, b, nb, n, n+1)
				}
			}
		}
		for b, c := range count {
			if want := keys / n; c < want*8/10 || c > want*12/10 {
				t.Errorf("%d buckets: bucket %d has %d keys, want about %d", n, b, c, want)
			}
		}
		if want := keys / (n + 1); moved < want*8/10 || moved > want*12/10 {
			t.Errorf("%d -> %d buckets moved %d keys, want about %d", n, n+1, moved, want)
		}
	}
	if Of("a/b", 4) != Of("a/b", 4) {
		t.Fatal("not deterministic")
	}
}

// electors are two replicas' Electors of one fake API server, stepped by
// hand on a fake clock.
func electors(t *testing.T, versions ...string) (*dynamicfake.FakeDynamicClient, *testingclock.FakeClock, []*Elector, *[]string) {
	t.Helper()
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{leasesGVR: "LeaseList"})
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	var changes []string
	var es []*Elector
	for i, v := range versions {
		id := fmt.Sprintf("r%d", i)
		es = append(es, New(d, Options{Namespace: "hub", Name: "b", Buckets: 1, Identity: id, Version: v, Clock: clk,
			OnChange: func(b int, held bool) { changes = append(changes, fmt.Sprintf("%s %d %v", id, b, held)) }}))
	}
	return d, clk, es, &changes
}

func TestElector(t *testing.T) {
	ctx := context.Background()
	d, clk, es, changes := electors(t, "v1", "v1")
	a, b := es[0], es[1]
	a.step(ctx, a.bs[0])
	b.step(ctx, b.bs[0])
	if !a.Holds(0) || b.Holds(0) || !a.Tried() || !b.Tried() {
		t.Fatalf("first try: a holds %v, b holds %v; want a only, both tried", a.Holds(0), b.Holds(0))
	}
	// a renews: b never takes it, however long.
	for range 10 {
		clk.Step(2 * time.Second)
		a.step(ctx, a.bs[0])
		b.step(ctx, b.bs[0])
		if !a.Holds(0) || b.Holds(0) {
			t.Fatalf("while a renews: a %v, b %v", a.Holds(0), b.Holds(0))
		}
	}
	// a dies (no more steps): b takes it once the record has not changed
	// for LeaseDuration as b saw it, not before.
	// (b saw a's last renewal in the last round.)
	clk.Step(9 * time.Second)
	b.step(ctx, b.bs[0])
	if b.Holds(0) {
		t.Fatal("b took the bucket before the lease duration passed")
	}
	clk.Step(2 * time.Second)
	b.step(ctx, b.bs[0])
	if !b.Holds(0) {
		t.Fatal("b did not take the expired bucket")
	}
	// a comes back (a partition healed): it finds b's name and lets go.
	a.step(ctx, a.bs[0])
	if a.Holds(0) {
		t.Fatal("a still holds the bucket b took over")
	}
	if b.Handoff(0) != "" {
		t.Errorf("b took the bucket over after an expiry: handoff %q, want none", b.Handoff(0))
	}
	// b releases, saying how far it may have sent: a takes it at its next
	// try, no expiry, and reads the bound; the Lease then no longer has it.
	b.SetHandoff(0, "42")
	b.release(ctx, b.bs[0])
	a.step(ctx, a.bs[0])
	if !a.Holds(0) || b.Holds(0) {
		t.Fatalf("after b's release: a %v, b %v", a.Holds(0), b.Holds(0))
	}
	if got := a.Handoff(0); got != "42" {
		t.Errorf("a's handoff after b's release: %q, want 42", got)
	}
	if l, _ := d.Resource(leasesGVR).Namespace("hub").Get(ctx, "b-0", metav1.GetOptions{}); l.GetAnnotations()[HandoffAnnotation] != "" {
		t.Errorf("the handoff annotation stayed on the Lease a holds: %v", l.GetAnnotations())
	}
	want := []string{"r0 0 true", "r1 0 true", "r0 0 false", "r1 0 false", "r0 0 true"}
	if fmt.Sprint(*changes) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v", *changes, want)
	}

	// The Lease deleted by hand: its holder writes it again and keeps it.
	if err := d.Resource(leasesGVR).Namespace("hub").Delete(ctx, "b-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Second)
	a.step(ctx, a.bs[0])
	if !a.Holds(0) {
		t.Fatal("a lost the bucket whose Lease was deleted")
	}

	// The holder set to garbage by hand: a loses it at once, b too sees it
	// held; once the garbage holder has not renewed for LeaseDuration, one
	// of them takes it back.
	u, err := d.Resource(leasesGVR).Namespace("hub").Get(ctx, "b-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"].(map[string]any)["holderIdentity"] = "garbage"
	u.SetAnnotations(nil)
	if _, err := d.Resource(leasesGVR).Namespace("hub").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.step(ctx, a.bs[0])
	b.step(ctx, b.bs[0])
	if a.Holds(0) || b.Holds(0) {
		t.Fatal("a replica holds the bucket whose Lease names garbage")
	}
	if n := a.OtherVersions(); n != 1 {
		t.Errorf("OtherVersions with a garbage holder = %d, want 1", n)
	}
	clk.Step(11 * time.Second)
	a.step(ctx, a.bs[0])
	if !a.Holds(0) {
		t.Fatal("the garbage holder's bucket was not taken back after the lease duration")
	}
}

// TestElectorLosesOnRenewDeadline: renewals that fail for RenewDeadline
// give the bucket up, before another replica could take it.
func TestElectorLosesOnRenewDeadline(t *testing.T) {
	ctx := context.Background()
	d, clk, es, _ := electors(t, "v1")
	a := es[0]
	a.step(ctx, a.bs[0])
	if !a.Holds(0) {
		t.Fatal("a did not acquire")
	}
	d.PrependReactor("*", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is unreachable")
	})
	clk.Step(6 * time.Second)
	a.step(ctx, a.bs[0])
	if !a.Holds(0) {
		t.Fatal("a gave up before the renew deadline")
	}
	clk.Step(2 * time.Second)
	a.step(ctx, a.bs[0])
	if a.Holds(0) {
		t.Fatal("a still holds the bucket 8 s after its last renewal (deadline 7 s)")
	}
}

// TestElectorOtherVersion: a bucket held by another version is counted.
func TestElectorOtherVersion(t *testing.T) {
	ctx := context.Background()
	_, _, es, _ := electors(t, "v1", "v2")
	es[0].step(ctx, es[0].bs[0])
	es[1].step(ctx, es[1].bs[0])
	if n := es[1].OtherVersions(); n != 1 {
		t.Errorf("v2 sees %d buckets held by another version, want 1", n)
	}
	if n := es[0].OtherVersions(); n != 0 {
		t.Errorf("the holder counts %d, want 0", n)
	}
}

// TestWaitFree: a light standby's read of each Lease says free for a
// missing Lease, a released one, one naming itself, and one unchanged for
// LeaseDuration as it observed it; and its observations are the
// elector's, so the step after Wait takes an expired bucket at once.
func TestWaitFree(t *testing.T) {
	ctx := context.Background()
	_, clk, es, _ := electors(t, "v1", "v1")
	a, b := es[0], es[1]
	if f, ok := b.free(ctx, b.bs[0]); !ok || f.Why != "missing" {
		t.Fatalf("no Lease: free %+v %v, want missing", f, ok)
	}
	a.step(ctx, a.bs[0])
	for range 10 { // a renews: never free
		if f, ok := b.free(ctx, b.bs[0]); ok {
			t.Fatalf("while a renews: free %+v", f)
		}
		clk.Step(2 * time.Second)
		a.step(ctx, a.bs[0])
	}
	if _, ok := b.free(ctx, b.bs[0]); ok {
		t.Fatal("free right after a's renewal")
	}
	clk.Step(9 * time.Second) // a died after its last renewal
	if f, ok := b.free(ctx, b.bs[0]); ok {
		t.Fatalf("free %+v before the lease duration passed", f)
	}
	clk.Step(time.Second)
	f, ok := b.free(ctx, b.bs[0])
	if !ok || f.Why != "expired" || f.Holder != "r0" {
		t.Fatalf("after the lease duration: free %+v %v, want expired, held by r0", f, ok)
	}
	b.step(ctx, b.bs[0]) // Run's first try: no second wait
	if !b.Holds(0) {
		t.Fatal("the step after Wait did not take the bucket Wait found expired")
	}
	b.release(ctx, b.bs[0])
	if f, ok := a.free(ctx, a.bs[0]); !ok || f.Why != "released" {
		t.Fatalf("after a release: free %+v %v, want released", f, ok)
	}
	a.step(ctx, a.bs[0])
	if f, ok := a.free(ctx, a.bs[0]); !ok || f.Why != "own" { // a restarted in its pod
		t.Fatalf("a Lease naming the replica: free %+v %v, want own", f, ok)
	}
}

// TestWaitEndsWithContext: Wait says once that every bucket is held, and
// returns the context's error once it ends.
func TestWaitEndsWithContext(t *testing.T) {
	_, _, es, _ := electors(t, "v1", "v1")
	a, b := es[0], es[1]
	a.step(context.Background(), a.bs[0])
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	held := make(chan struct{})
	go func() { _, err := b.Wait(ctx, func() { close(held) }); done <- err }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not say every bucket is held")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return once its context ended")
	}
}

// TestWaitTakesBucketZero: a light standby starts serving only by taking
// bucket 0 (or a Lease naming it): another bucket's missing Lease does
// not end its wait; bucket 0's expiry does, taken at once; and of two
// replicas waiting on no Leases at all, one takes bucket 0 and the other
// stands by.
func TestWaitTakesBucketZero(t *testing.T) {
	d := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{leasesGVR: "LeaseList"})
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	elector := func(ns, id string) *Elector {
		return New(d, Options{Namespace: ns, Name: "b", Buckets: 2, Identity: id, Version: "v1", Clock: clk})
	}
	type result struct {
		f   Free
		err error
	}
	wait := func(e *Elector) (held chan struct{}, done chan result, cancel func()) {
		ctx, cancel := context.WithCancel(context.Background())
		held, done = make(chan struct{}), make(chan result, 1)
		go func() { f, err := e.Wait(ctx, func() { close(held) }); done <- result{f, err} }()
		return held, done, cancel
	}
	within := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}

	a, b := elector("one", "a"), elector("one", "b")
	a.step(context.Background(), a.bs[0]) // a holds bucket 0; bucket 1 has no Lease
	held, done, cancel := wait(b)
	defer cancel()
	within(held, "b did not stand by while a holds bucket 0")
	select {
	case r := <-done:
		t.Fatalf("b's wait ended with %+v while a holds bucket 0 (bucket 1's Lease missing must not end it)", r)
	default:
	}
	// held is called before the wait's timer is set: step the clock only
	// once it is, or the timer is set after the step and never fires.
	for deadline := time.Now().Add(10 * time.Second); !clk.HasWaiters(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b's wait set no timer after its first round")
		}
	}
	clk.Step(11 * time.Second) // a died after its last renewal
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("b did not take bucket 0 once it expired")
	}
	if r.err != nil || r.f.Bucket != 0 || r.f.Why != "expired" || r.f.Holder != "a" || !b.Holds(0) {
		t.Fatalf("b's wait ended with %+v (holds bucket 0: %v), want bucket 0 taken over from a's expiry", r, b.Holds(0))
	}

	c, e := elector("two", "c"), elector("two", "e")
	heldC, doneC, cancelC := wait(c)
	defer cancelC()
	heldE, doneE, cancelE := wait(e)
	defer cancelE()
	var winner, loser *Elector
	var loserHeld chan struct{}
	select {
	case <-doneC:
		winner, loser, loserHeld = c, e, heldE
	case <-doneE:
		winner, loser, loserHeld = e, c, heldC
	case <-time.After(10 * time.Second):
		t.Fatal("neither of two replicas waiting on no Leases took bucket 0")
	}
	within(loserHeld, "the other replica did not stand by")
	if !winner.Holds(0) || loser.Holds(0) {
		t.Fatalf("bucket 0: the winner holds it %v, the other %v; want the winner only", winner.Holds(0), loser.Holds(0))
	}
}
