package serverless_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/testkit"
)

// TestAnswerAdmitted: an object event is answered 200 "admitted" while its
// reconcile is still blocked; the reconcile then happens. Past MaxAdmitted
// keys waiting, an event is answered after its reconcile. A sweep is still
// answered after its reconciles.
func TestAnswerAdmitted(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 10)
	p.gate = make(chan struct{})
	h := newHarness(t, p, nil, serverless.Options{AnswerAdmitted: true, MaxAdmitted: 2, MaxConcurrentReconciles: 1})

	a := h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "a"), "widgets"), false)
	if a.code != http.StatusOK || !strings.HasPrefix(a.result, "admitted 1 key(s)") {
		t.Fatalf("first event: %d %q %q, want 200 admitted before its reconcile", a.code, a.result, a.body)
	}
	if got := <-p.started; got != req(h.ns, "a") {
		t.Fatalf("reconciling %v, want a", got)
	}
	b := h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "b"), "widgets"), false)
	if b.code != http.StatusOK || !strings.HasPrefix(b.result, "admitted") {
		t.Fatalf("second event: %d %q, want admitted (a and b are within MaxAdmitted 2)", b.code, b.result)
	}
	// a is running and b queued: the limit is reached, so c waits.
	answered := make(chan answer, 1)
	go func() {
		answered <- h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "c"), "widgets"), false)
	}()
	if !testkit.Wait(10*time.Second, func() bool { return h.engine.Stats().Submitted.Load() == 3 }) {
		t.Fatal("c never reached the queue")
	}
	select {
	case c := <-answered:
		t.Fatalf("c answered %d %q before its reconcile, past MaxAdmitted", c.code, c.result)
	default:
	}
	for range 3 {
		p.gate <- struct{}{}
		if p.calls.Load() < 3 {
			<-p.started
		}
	}
	c := <-answered
	if c.code != http.StatusOK || !strings.HasPrefix(c.result, "reconciled") {
		t.Fatalf("c: %d %q, want 200 reconciled", c.code, c.result)
	}
	for _, k := range []string{"a", "b", "c"} {
		if n := len(p.spansOf(req(h.ns, k))); n != 1 {
			t.Fatalf("%s reconciled %d times, want 1", k, n)
		}
	}
	if !coveredBy(c, p.spansOf(req(h.ns, "c"))) {
		t.Fatal("c was answered before its reconcile ended")
	}
	h.create(newWidget(h.ns, "swept"))
	sweep := make(chan answer, 1)
	go func() {
		sweep <- h.post(cloudevent.NewPing("/apis/v1/namespaces/"+h.ns+"/pingsources/sweep", []byte(`{"sweep":"all"}`)), false)
	}()
	<-p.started
	p.gate <- struct{}{}
	if s := <-sweep; s.code != http.StatusOK || !coveredBy(s, p.spansOf(req(h.ns, "swept"))) {
		t.Fatalf("sweep: %d %q, want 200 after its reconcile", s.code, s.result)
	}
}

// TestAnswerAdmittedDrains: on shutdown, the keys admitted and not yet
// reconciled are reconciled before Serve returns; an event that arrives
// while draining is refused with 503.
func TestAnswerAdmittedDrains(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 10)
	p.gate = make(chan struct{})
	h := newHarness(t, p, nil, serverless.Options{AnswerAdmitted: true, MaxConcurrentReconciles: 1})
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- h.engine.Serve(ctx, serverless.ServeOptions{Addr: "127.0.0.1:0", ShutdownTimeout: 20 * time.Second,
			Ready: func(a net.Addr) { addr <- "http://" + a.String() }})
	}()
	url := <-addr
	for _, name := range []string{"one", "two", "three"} {
		ev := h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, name), "widgets")
		r, _ := cloudevent.NewRequest(context.Background(), url, ev, false)
		if a := h.do(r); a.code != http.StatusOK || !strings.HasPrefix(a.result, "admitted") {
			t.Fatalf("%s: %d %q, want admitted", name, a.code, a.result)
		}
	}
	<-p.started // one runs; two and three wait for the only slot
	cancel()
	if !testkit.Wait(10*time.Second, h.engine.Draining) {
		t.Fatal("not draining")
	}
	go func() {
		for range 3 {
			p.gate <- struct{}{}
		}
	}()
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v, want nil after draining", err)
	}
	for _, name := range []string{"one", "two", "three"} {
		if n := len(p.spansOf(req(h.ns, name))); n != 1 {
			t.Fatalf("%s reconciled %d times before Serve returned, want 1", name, n)
		}
	}
}
