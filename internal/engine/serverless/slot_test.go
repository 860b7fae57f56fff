package serverless_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/testkit"
)

// blocker holds the reconciles of chosen keys until they are let go.
type blocker struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

func (b *blocker) hold(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[string]chan struct{}{}
	}
	b.held[name] = make(chan struct{})
}

// let lets name's reconciles go; again is a no-op.
func (b *blocker) let(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.held[name]; g != nil {
		close(g)
		delete(b.held, name)
	}
}

// letAll lets every held key go (a failed test must not leave a handler
// waiting).
func (b *blocker) letAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, g := range b.held {
		close(g)
		delete(b.held, name)
	}
}

func (b *blocker) gate(name string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[name]
}

// result is a probe.result that waits while its key is held.
func (b *blocker) result(r reconcile.Request, _ int) (reconcile.Result, error) {
	if g := b.gate(r.Name); g != nil {
		<-g
	}
	return reconcile.Result{}, nil
}

// slotted is a harness whose engine (one reconcile slot, the given Locker
// options) serves h.srv, and a probe whose reconciles of held keys block.
func slotted(t *testing.T, opts serverless.Options) (*harness, *probe, *blocker, *serverless.Engine) {
	t.Helper()
	p, b := newProbe(), &blocker{}
	p.started = make(chan reconcile.Request, 100)
	p.result = b.result
	h := newHarness(t, p, nil, serverless.Options{})
	t.Cleanup(b.letAll) // before the server's Close: cleanups run last-in first-out
	l, _ := newLocker(t, h, "a")
	opts.Locker, opts.MaxConcurrentReconciles = l, 1
	e := mustEngine(t, h, opts)
	h.srv.Config.Handler = e
	return h, p, b, e
}

func (h *harness) hasLease(name string) bool {
	want := lease.Name("widgets", req(h.ns, name).NamespacedName)
	for _, l := range h.leases() {
		if l.Name == want {
			return true
		}
	}
	return false
}

func (h *harness) postAsync(name string) <-chan answer {
	out := make(chan answer, 1)
	ev := h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, name), "widgets")
	go func() { out <- h.post(ev, false) }()
	return out
}

func started(t *testing.T, p *probe) string {
	t.Helper()
	select {
	case r := <-p.started:
		return r.Name
	case <-time.After(10 * time.Second):
		t.Fatal("no reconcile started")
		return ""
	}
}

// TestLeaseTakenWhileAnotherKeyReconciles: with one reconcile slot, the
// Lease of key b is taken while a's reconcile holds the slot, and b
// reconciles only once a's reconcile has returned. An event for b that
// arrives while b waits for the slot joins b's reconcile.
func TestLeaseTakenWhileAnotherKeyReconciles(t *testing.T) {
	h, p, b, e := slotted(t, serverless.Options{})
	b.hold("a")
	ansA := h.postAsync("a")
	if s := started(t, p); s != "a" {
		t.Fatalf("%s started, want a", s)
	}
	ansB := h.postAsync("b")
	if !testkit.Wait(10*time.Second, func() bool { return h.hasLease("b") }) {
		t.Fatal("b's Lease was not taken while a reconciled: taking it waits for the reconcile slot")
	}
	ansB2 := h.postAsync("b") // b waits for the slot: this joins its reconcile
	if !testkit.Wait(10*time.Second, func() bool { return e.Stats().Submitted.Load() == 3 }) {
		t.Fatalf("%d keys submitted, want 3", e.Stats().Submitted.Load())
	}
	select {
	case r := <-p.started:
		t.Fatalf("%s reconciled while a held the only slot", r.Name)
	default:
	}
	b.let("a")
	if a := <-ansA; a.code != 200 {
		t.Fatalf("a: %d %s", a.code, a.body)
	}
	if s := started(t, p); s != "b" {
		t.Fatalf("%s started, want b", s)
	}
	for _, ans := range []<-chan answer{ansB, ansB2} {
		if a := <-ans; a.code != 200 || !strings.Contains(a.result, "reconciled") {
			t.Fatalf("b: %d %q %s", a.code, a.result, a.body)
		}
	}
	if n := len(p.spansOf(req(h.ns, "b"))); n != 1 {
		t.Fatalf("b reconciled %d times, want 1: the event that came while it waited for the slot joins it", n)
	}
	if most := p.most.Load(); most != 1 {
		t.Fatalf("%d reconciles at once, want 1 (MaxConcurrentReconciles)", most)
	}
}

// TestLeaseWorkWhileTheSlotIsFull: with one reconcile slot held by a's
// reconcile, an idle key's Lease is released, and an event for a key
// another instance holds is answered "handed off", both before a's
// reconcile returns.
func TestLeaseWorkWhileTheSlotIsFull(t *testing.T) {
	clk := backoff.NewFakeClock(time.Now()) // times the idle release
	h, p, b, e := slotted(t, serverless.Options{LeaseKeepIdle: time.Second, Clock: clk})
	if a := <-h.postAsync("x"); a.code != 200 {
		t.Fatalf("x: %d %s", a.code, a.body)
	}
	started(t, p)
	if e.Kept() != 1 || !h.hasLease("x") {
		t.Fatalf("x's Lease: kept %d, in the API server %v; want it kept", e.Kept(), h.hasLease("x"))
	}
	// Another instance keeps the Lease of h.
	lo, _ := newLocker(t, h, "other")
	other := mustEngine(t, h, serverless.Options{Locker: lo, LeaseKeepIdle: time.Hour})
	otherSrv := httptest.NewServer(other)
	defer otherSrv.Close()
	r, _ := cloudevent.NewRequest(context.Background(), otherSrv.URL, h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "h"), "widgets"), false)
	if a := h.do(r); a.code != 200 || other.Kept() != 1 {
		t.Fatalf("h to the other instance: %d %s, kept %d", a.code, a.body, other.Kept())
	}
	started(t, p)

	b.hold("a")
	ansA := h.postAsync("a")
	if s := started(t, p); s != "a" {
		t.Fatalf("%s started, want a", s)
	}
	if e.Kept() != 1 {
		t.Fatalf("kept %d Leases before x's idle period ended, want 1", e.Kept())
	}
	clk.Step(time.Second)
	if !testkit.Wait(10*time.Second, func() bool { return e.Kept() == 0 && !h.hasLease("x") }) {
		t.Fatalf("x's idle Lease was not released while a reconciled (kept %d): the release waits for the reconcile slot", e.Kept())
	}
	if a := <-h.postAsync("h"); a.code != 200 || !strings.Contains(a.result, "handed off") {
		t.Fatalf("h while a reconciles: %d %q %s, want 200 handed off", a.code, a.result, a.body)
	}
	select {
	case <-ansA:
		t.Fatal("a was answered before it was let go")
	default:
	}
	b.let("a")
	if a := <-ansA; a.code != 200 {
		t.Fatalf("a: %d %s", a.code, a.body)
	}
	if p.overlaps.Load() != 0 || p.most.Load() > 2 { // a here and h at the other instance at most
		t.Fatalf("%d overlapping reconciles, %d at once", p.overlaps.Load(), p.most.Load())
	}
}

// TestDrainReleasesWhileTheSlotIsFull: on shutdown, an instance whose one
// reconcile slot is held releases its kept Leases without waiting for that
// reconcile, finishes it, releases its Lease too, and leaves none.
func TestDrainReleasesWhileTheSlotIsFull(t *testing.T) {
	h, p, b, e := slotted(t, serverless.Options{LeaseKeepIdle: time.Hour, AnswerAdmitted: true})
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- e.Serve(ctx, serverless.ServeOptions{Addr: "127.0.0.1:0", ShutdownTimeout: 20 * time.Second,
			Ready: func(a net.Addr) { addr <- "http://" + a.String() }})
	}()
	url := <-addr
	send := func(name string) answer {
		r, _ := cloudevent.NewRequest(context.Background(), url, h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, name), "widgets"), false)
		return h.do(r)
	}
	if a := send("x"); a.code != 200 {
		t.Fatalf("x: %d %s", a.code, a.body)
	}
	started(t, p)
	if !testkit.Wait(10*time.Second, func() bool { return e.Kept() == 1 }) {
		t.Fatal("x's Lease is not kept")
	}
	b.hold("a")
	if a := send("a"); a.code != 200 || !strings.Contains(a.result, "admitted") {
		t.Fatalf("a: %d %q %s, want admitted", a.code, a.result, a.body)
	}
	if s := started(t, p); s != "a" {
		t.Fatalf("%s started, want a", s)
	}
	cancel()
	if !testkit.Wait(10*time.Second, func() bool { return !h.hasLease("x") }) {
		t.Fatal("x's kept Lease was not released on shutdown while a reconciled")
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) before a's reconcile did", err)
	default:
	}
	b.let("a")
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if n := len(h.leases()); n != 0 {
		t.Fatalf("%d Leases left after shutdown, want 0", n)
	}
	if n := len(p.spansOf(req(h.ns, "a"))); n != 1 {
		t.Fatalf("a reconciled %d times, want 1", n)
	}
}

// TestReconcilesBoundedWithLeases: a burst over many keys never has more
// reconciler calls at once than MaxConcurrentReconciles, though the queue
// runs more keys (their Lease work), and never two of one key.
func TestReconcilesBoundedWithLeases(t *testing.T) {
	p := newProbe()
	p.result = func(reconcile.Request, int) (reconcile.Result, error) {
		time.Sleep(5 * time.Millisecond) // so that reconciles would overlap if they could
		return reconcile.Result{}, nil
	}
	h := newHarness(t, p, nil, serverless.Options{})
	l, _ := newLocker(t, h, "a")
	e := mustEngine(t, h, serverless.Options{Locker: l, MaxConcurrentReconciles: 2, LeaseKeepIdle: 50 * time.Millisecond})
	h.srv.Config.Handler = e
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a := h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, fmt.Sprintf("k%d", i%10)), "widgets"), false); a.code != 200 {
				t.Errorf("event %d: %d %s", i, a.code, a.body)
			}
		}()
	}
	wg.Wait()
	if most := p.most.Load(); most != 2 {
		t.Fatalf("%d reconciles at once, want 2 (MaxConcurrentReconciles, reached under this burst)", most)
	}
	if p.overlaps.Load() != 0 {
		t.Fatalf("%d overlapping reconciles of one key", p.overlaps.Load())
	}
	if !testkit.Wait(10*time.Second, func() bool { return len(h.leases()) == 0 }) {
		t.Fatalf("%d Leases left", len(h.leases()))
	}
}
