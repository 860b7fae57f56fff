package keyq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/opzero/opzero/internal/keyq"
	"github.com/opzero/opzero/internal/testkit"
)

// held waits until the queue has decided about a settle timer that fired:
// either it is holding the follow-up again (a timer waits on fc) or a run
// has started. It fails t if a run started.
func held(t *testing.T, fc *testingclock.FakeClock, g *gate, why string) {
	t.Helper()
	if !testkit.Wait(hang, func() bool { return fc.HasWaiters() || len(g.started) > 0 }) {
		t.Fatal("the settle timer fired, but the queue neither held nor ran the follow-up")
	}
	if len(g.started) > 0 {
		t.Fatalf("follow-up started %s", why)
	}
}

// TestSettleFoldsBurst: submissions that keep arriving after a run ends
// join one held follow-up, which starts only once they pause; every ticket
// completes with it.
func TestSettleFoldsBurst(t *testing.T) {
	g := newGate()
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	const settle = 300 * time.Millisecond
	q := keyq.New(keyq.Options{MaxConcurrent: 2, Settle: settle, MaxSettle: time.Hour, Clock: fc}, g.run)
	first := q.Submit("a", 0)
	if k := g.next(t); k != "a" { // a first run is not held
		t.Fatalf("first run of %q", k)
	}
	var tickets []*keyq.Ticket
	tickets = append(tickets, q.Submit("a", 1)) // during run 1
	g.release <- struct{}{}
	await(t, "run 1's ticket", first.Done())
	for i := 2; i <= 6; i++ { // the burst goes on after run 1 ended
		fc.Step(settle / 15)
		tickets = append(tickets, q.Submit("a", i))
		held(t, fc, g, "while submissions were still arriving")
	}
	lastSubmit := fc.Now()
	if q.Len() != 1 || q.Queued() != 0 || q.Running() != 0 {
		t.Fatalf("settling: Len=%d Queued=%d Running=%d, want 1 0 0", q.Len(), q.Queued(), q.Running())
	}
	fc.SetTime(lastSubmit.Add(settle - time.Millisecond)) // the first timer fires; the burst moved the due time
	held(t, fc, g, "before the submissions had paused for Settle")
	fc.SetTime(lastSubmit.Add(settle))
	g.next(t)
	g.release <- struct{}{}
	for _, tk := range tickets {
		if err := tk.Wait(context.Background()); err == nil || err.Error() != "run 2 of a" {
			t.Fatalf("ticket: %v, want run 2 of a", err)
		}
	}
	if runs := g.runsSoFar(); len(runs) != 2 || len(runs[1]) != 6 {
		t.Fatalf("runs %v, want [[0] [1 2 3 4 5 6]]", runs)
	}
	assertIdle(t, q)
}

// TestSettleMaxSettle: submissions that never pause do not hold a follow-up
// beyond MaxSettle after the run before it ended.
func TestSettleMaxSettle(t *testing.T) {
	g := newGate()
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	const max = 100 * time.Millisecond
	q := keyq.New(keyq.Options{Settle: time.Hour, MaxSettle: max, Clock: fc}, g.run)
	first := q.Submit("a", 0)
	g.next(t)
	follow := q.Submit("a", 1)
	g.release <- struct{}{}
	await(t, "run 1's ticket", first.Done())
	ended := fc.Now()
	for i := 2; fc.Now().Before(ended.Add(max)); i++ { // a steady stream that never pauses for Settle
		fc.Step(5 * time.Millisecond)
		q.Submit("a", i)
		if fc.Now().Before(ended.Add(max)) {
			held(t, fc, g, "before MaxSettle")
		}
	}
	g.next(t)                 // held at most MaxSettle
	last := q.Submit("a", -1) // during the follow-up
	g.release <- struct{}{}
	await(t, "the follow-up's ticket", follow.Done())
	fc.Step(max) // the last submission's follow-up: MaxSettle after the run before it
	g.next(t)
	g.release <- struct{}{}
	await(t, "the last ticket", last.Done())
	waitIdle(t, q)
}

// TestSettleShutdown: a held follow-up completes with ErrShutdown and its
// timer is stopped: stepping past it starts nothing.
func TestSettleShutdown(t *testing.T) {
	g := newGate()
	fc := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	q := keyq.New(keyq.Options{Settle: 20 * time.Millisecond, Clock: fc}, g.run)
	first := q.Submit("a", 0)
	g.next(t)
	held := q.Submit("a", 1)
	g.release <- struct{}{}
	await(t, "run 1's ticket", first.Done())
	if !fc.HasWaiters() {
		t.Fatal("no settle timer for the follow-up")
	}
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := held.Err(); !errors.Is(err, keyq.ErrShutdown) {
		t.Fatalf("held follow-up: %v, want ErrShutdown", err)
	}
	if fc.HasWaiters() {
		t.Fatal("Shutdown left the settle timer running")
	}
	fc.Step(time.Second)
	if len(g.started) != 0 {
		t.Fatalf("run of %q after Shutdown", <-g.started)
	}
	assertIdle(t, q)
}

func waitIdle[K comparable, V any](t *testing.T, q *keyq.Queue[K, V]) {
	t.Helper()
	testkit.Wait(hang, func() bool { return q.Len() == 0 })
	assertIdle(t, q)
}
