package keyq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/keyq"
)

// TestSettleFoldsBurst: submissions that keep arriving after a run ends
// join one held follow-up, which starts only once they pause; every ticket
// completes with it.
func TestSettleFoldsBurst(t *testing.T) {
	g := newGate()
	const settle = 300 * time.Millisecond // wide: a loaded machine oversleeps
	q := keyq.New(keyq.Options{MaxConcurrent: 2, Settle: settle, MaxSettle: time.Hour}, g.run)
	first := q.Submit("a", 0)
	if k := g.next(t); k != "a" { // a first run is not held
		t.Fatalf("first run of %q", k)
	}
	var tickets []*keyq.Ticket
	tickets = append(tickets, q.Submit("a", 1)) // during run 1
	g.release <- struct{}{}
	await(t, "run 1's ticket", first.Done())
	var lastSubmit time.Time
	for i := 2; i <= 6; i++ { // the burst goes on after run 1 ended
		time.Sleep(settle / 15)
		lastSubmit = time.Now()
		tickets = append(tickets, q.Submit("a", i))
		select {
		case <-g.started:
			t.Fatalf("follow-up started while submissions were still arriving (%d)", i)
		default:
		}
	}
	if q.Len() != 1 || q.Queued() != 0 || q.Running() != 0 {
		t.Fatalf("settling: Len=%d Queued=%d Running=%d, want 1 0 0", q.Len(), q.Queued(), q.Running())
	}
	g.next(t)
	if since := time.Since(lastSubmit); since < settle {
		t.Fatalf("follow-up started %v after the last submission, want >= %v", since, settle)
	}
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
	const max = 100 * time.Millisecond
	q := keyq.New(keyq.Options{Settle: time.Hour, MaxSettle: max}, g.run)
	q.Submit("a", 0)
	g.next(t)
	follow := q.Submit("a", 1)
	g.release <- struct{}{}
	ended := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // a steady stream that never pauses for Settle
		defer close(stopped)
		for i := 2; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				q.Submit("a", i)
			}
		}
	}()
	g.next(t)
	started := time.Since(ended)
	close(stop)
	await(t, "the stream to stop", stopped)
	if started < max {
		t.Fatalf("follow-up started %v after the run ended, want >= MaxSettle %v", started, max)
	}
	last := q.Submit("a", -1) // during the follow-up
	g.release <- struct{}{}
	await(t, "the follow-up's ticket", follow.Done())
	g.next(t) // held at most MaxSettle
	g.release <- struct{}{}
	await(t, "the last ticket", last.Done())
	waitIdle(t, q)
}

// TestSettleShutdown: a held follow-up completes with ErrShutdown and its
// timer does nothing afterwards.
func TestSettleShutdown(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{Settle: 20 * time.Millisecond}, g.run)
	q.Submit("a", 0)
	g.next(t)
	held := q.Submit("a", 1)
	g.release <- struct{}{}
	for q.Running() != 0 {
		time.Sleep(time.Millisecond)
	}
	if err := q.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := held.Err(); !errors.Is(err, keyq.ErrShutdown) {
		t.Fatalf("held follow-up: %v, want ErrShutdown", err)
	}
	time.Sleep(50 * time.Millisecond) // past the settle timer
	select {
	case k := <-g.started:
		t.Fatalf("run of %q after Shutdown", k)
	default:
	}
	assertIdle(t, q)
}

func waitIdle[K comparable, V any](t *testing.T, q *keyq.Queue[K, V]) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for q.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assertIdle(t, q)
}
