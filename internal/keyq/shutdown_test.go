package keyq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/keyq"
)

// TestShutdown: started runs finish; queued runs and pending follow-ups are
// cancelled with ErrShutdown at once; later submissions are refused.
func TestShutdown(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{MaxConcurrent: 1}, g.run)
	running := q.Submit("a", 1)
	g.next(t)
	followUp := q.Submit("a", 2)
	queued := q.Submit("b", 3)

	done := make(chan error, 1)
	go func() { done <- q.Shutdown(context.Background()) }()
	for name, tk := range map[string]*keyq.Ticket{"follow-up": followUp, "queued": queued} {
		await(t, name, tk.Done())
		if err := tk.Err(); !errors.Is(err, keyq.ErrShutdown) {
			t.Fatalf("%s run: %v, want ErrShutdown", name, err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a run was in progress", err)
	default:
	}
	late := q.Submit("c", 4)
	select {
	case <-late.Done():
	default:
		t.Fatal("a Submit after Shutdown returned a ticket that is not done")
	}
	if err := late.Err(); !errors.Is(err, keyq.ErrShutdown) {
		t.Fatalf("Submit after Shutdown: %v, want ErrShutdown", err)
	}

	g.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v, want nil once the run finished", err)
	}
	if err := running.Err(); err == nil || err.Error() != "run 1 of a" {
		t.Fatalf("started run: %v, want its own result", err)
	}
	if runs := g.runsSoFar(); len(runs) != 1 {
		t.Fatalf("%d runs, want only the one started before Shutdown", len(runs))
	}
	assertIdle(t, q)
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown = %v, want nil", err)
	}
}

// TestShutdownDeadline: Shutdown leaves the runs' context alone until its own
// context ends, then cancels it and returns the context's error.
func TestShutdownDeadline(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	q := keyq.New(keyq.Options{}, func(ctx context.Context, _ string, _ []int) error {
		ctxs <- ctx
		<-ctx.Done()
		return context.Cause(ctx)
	})
	tk := q.Submit("k", 1)
	var runCtx context.Context
	select {
	case runCtx = <-ctxs:
	case <-time.After(hang):
		t.Fatal("the run did not start")
	}

	shCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Shutdown(shCtx) }()
	// The probe waits behind k for the only slot: only Shutdown completes
	// it, so once it is done, Shutdown is waiting for k.
	probe := q.Submit("probe", 0)
	await(t, "Shutdown to cancel the queued probe", probe.Done())
	if err := probe.Err(); !errors.Is(err, keyq.ErrShutdown) {
		t.Fatalf("queued probe: %v, want ErrShutdown", err)
	}
	if err := runCtx.Err(); err != nil {
		t.Fatalf("the run's context ended (%v) before Shutdown's deadline", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled wrapped", err)
	}
	await(t, "the run's context", runCtx.Done())
	await(t, "the ticket", tk.Done())
	if tk.Err() == nil {
		t.Fatal("a run cancelled by Shutdown reported success")
	}
	assertIdle(t, q)
}

// TestShutdownIdle: an idle queue shuts down at once.
func TestShutdownIdle(t *testing.T) {
	q := keyq.New(keyq.Options{}, func(context.Context, string, []int) error { return nil })
	if err := q.Submit("k", 1).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // an ended context: Shutdown must still prefer "drained"
	if err := q.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of an idle queue = %v, want nil", err)
	}
}

// TestDrain: Drain refuses new submissions but runs everything already
// submitted (the run in progress, its pending follow-up, the queued keys,
// and what was submitted before the refusal); then the queue is shut down.
func TestDrain(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{MaxConcurrent: 1, Settle: time.Millisecond}, g.run)
	running := q.Submit("a", 1)
	g.next(t)
	followUp := q.Submit("a", 2)
	queued := q.Submit("b", 3)

	done := make(chan error, 1)
	go func() { done <- q.Drain(context.Background()) }()
	// Drain refuses before it waits; submissions accepted until then join
	// one batch of key "late" (they ran before Drain and must run).
	refused := 100
	for ; ; refused++ {
		tk := q.Submit("late", refused)
		select {
		case <-tk.Done(): // a ticket is done at Submit only when refused
			if !errors.Is(tk.Err(), keyq.ErrShutdown) {
				t.Fatalf("refused submission: %v, want ErrShutdown", tk.Err())
			}
		default:
			continue
		}
		break
	}
	var err error
	for finished := false; !finished; {
		g.release <- struct{}{}
		select {
		case err = <-done:
			finished = true
		case <-g.started:
		}
	}
	if err != nil {
		t.Fatalf("Drain = %v, want nil", err)
	}
	for name, tk := range map[string]*keyq.Ticket{"running": running, "follow-up": followUp, "queued": queued} {
		if err := tk.Err(); err == nil || errors.Is(err, keyq.ErrShutdown) {
			t.Fatalf("%s: %v, want the error of its run", name, err)
		}
	}
	ran := map[int]bool{}
	for _, r := range g.runsSoFar() {
		for _, p := range r {
			ran[p] = true
		}
	}
	for p := 1; p < refused; p++ {
		if p == 4 {
			p = 100
		}
		if p < refused && !ran[p] {
			t.Fatalf("submission %d was accepted but never ran (runs %v)", p, g.runsSoFar())
		}
	}
	if ran[refused] {
		t.Fatalf("submission %d was refused but ran", refused)
	}
	assertIdle(t, q)
}
