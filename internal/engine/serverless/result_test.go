package serverless_test

import (
	"context"
	"errors"
	"github.com/opzero/opzero/internal/testkit"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// waitFor polls cond (a fired timer's reconcile runs on its own goroutine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testkit.Wait(10*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestResultSemantics: an error answers 500 and retries with per-key
// exponential backoff; a success cancels a pending retry; a TerminalError
// answers 422 and is not retried; RequeueAfter reconciles again later.
func TestResultSemantics(t *testing.T) {
	clock := backoff.NewFakeClock(time.Unix(0, 0))
	policy := backoff.Policy{Base: time.Second, Cap: 8 * time.Second}
	p := newProbe()
	var mu sync.Mutex
	script := map[string][]func() (reconcile.Result, error){}
	p.result = func(r reconcile.Request, _ int) (reconcile.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		steps := script[r.Name]
		if len(steps) == 0 {
			return reconcile.Result{}, nil
		}
		script[r.Name] = steps[1:]
		return steps[0]()
	}
	fail := func() (reconcile.Result, error) { return reconcile.Result{}, errors.New("backend down") }
	h := newHarness(t, p, nil, serverless.Options{Clock: clock, Backoff: &policy})
	send := func(name string) answer {
		w := newWidget(h.ns, name)
		return h.post(h.event(cloudevent.Reference, cloudevent.Update, w, "widgets"), false)
	}
	count := func(name string) int { return len(p.spansOf(req(h.ns, name))) }

	t.Run("retries follow the policy", func(t *testing.T) {
		mu.Lock()
		script["flaky"] = []func() (reconcile.Result, error){fail, fail, fail}
		mu.Unlock()
		a := send("flaky")
		if a.code != http.StatusInternalServerError || !strings.Contains(a.body, "backend down") || !strings.Contains(a.body, "retry in 1s") {
			t.Fatalf("failed reconcile answered %d %q, want 500 naming the error and the retry", a.code, a.body)
		}
		for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			clock.Step(d - time.Millisecond)
			if got := count("flaky"); got != i+1 {
				t.Fatalf("retry %d fired before its delay %s (%d reconciles)", i+1, d, got)
			}
			clock.Step(time.Millisecond)
			waitFor(t, "retry", func() bool { return count("flaky") == i+2 })
		}
		clock.Step(time.Hour)
		if got := count("flaky"); got != 4 {
			t.Fatalf("%d reconciles after 3 failures and a success, want 4 (no retry after success)", got)
		}
	})

	t.Run("a success cancels a pending retry", func(t *testing.T) {
		mu.Lock()
		script["healed"] = []func() (reconcile.Result, error){fail}
		mu.Unlock()
		if a := send("healed"); a.code != 500 {
			t.Fatalf("got %d, want 500", a.code)
		}
		if a := send("healed"); a.code != 200 {
			t.Fatalf("got %d %s, want 200", a.code, a.body)
		}
		if n := clock.Timers(); n != 0 {
			t.Fatalf("%d retry timer(s) pending after the success, want 0: a success cancels the pending retry", n)
		}
		clock.Step(time.Hour)
		if got := count("healed"); got != 2 {
			t.Fatalf("%d reconciles, want 2: the success must cancel the pending retry", got)
		}
	})

	t.Run("terminal error", func(t *testing.T) {
		mu.Lock()
		script["doomed"] = []func() (reconcile.Result, error){func() (reconcile.Result, error) {
			return reconcile.Result{}, reconcile.TerminalError(errors.New("spec is invalid"))
		}}
		mu.Unlock()
		a := send("doomed")
		if a.code != http.StatusUnprocessableEntity || !strings.Contains(a.body, "spec is invalid") {
			t.Fatalf("got %d %q, want 422 naming the error", a.code, a.body)
		}
		if n := clock.Timers(); n != 0 {
			t.Fatalf("%d retry timer(s) pending after a terminal error, want 0", n)
		}
		clock.Step(time.Hour)
		if got := count("doomed"); got != 1 {
			t.Fatalf("%d reconciles, want 1 (terminal errors are not retried)", got)
		}
	})

	t.Run("RequeueAfter", func(t *testing.T) {
		mu.Lock()
		script["periodic"] = []func() (reconcile.Result, error){func() (reconcile.Result, error) {
			return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
		}}
		mu.Unlock()
		if a := send("periodic"); a.code != 200 {
			t.Fatalf("got %d", a.code)
		}
		clock.Step(29 * time.Second)
		if got := count("periodic"); got != 1 {
			t.Fatalf("requeue fired early: %d reconciles", got)
		}
		clock.Step(time.Second)
		waitFor(t, "the requeue", func() bool { return count("periodic") == 2 })
	})
}

// TestGracefulShutdown: on shutdown the in-flight reconcile finishes and its
// request is answered 200; new events get 503; Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 10)
	p.gate = make(chan struct{})
	h := newHarness(t, p, nil, serverless.Options{MaxWait: 20 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- h.engine.Serve(ctx, serverless.ServeOptions{Addr: "127.0.0.1:0", ShutdownTimeout: 10 * time.Second,
			Ready: func(a net.Addr) { addr <- "http://" + a.String() }})
	}()
	url := <-addr
	inflight := make(chan answer, 1)
	go func() {
		ev := h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "slow"), "widgets")
		req, _ := cloudevent.NewRequest(context.Background(), url, ev, false)
		inflight <- h.do(req)
	}()
	<-p.started
	cancel()
	waitFor(t, "draining", h.engine.Draining)
	func() {
		ev := h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "late"), "widgets")
		rec := httptest.NewRecorder()
		req, _ := cloudevent.NewRequest(context.Background(), "http://x/", ev, false)
		h.engine.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Errorf("event while draining: %d %q, want 503 with Retry-After", rec.Code, rec.Body.String())
		}
	}()
	close(p.gate)
	if a := <-inflight; a.code != 200 {
		t.Fatalf("in-flight request answered %d %s, want 200 after its reconcile", a.code, a.body)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve returned %v, want nil after a clean drain", err)
	}
	if n := len(p.spansOf(req(h.ns, "late"))); n != 0 {
		t.Fatalf("an event that arrived while draining was reconciled %d times", n)
	}
}
