package keyq_test

import (
	"context"
	"slices"
	"testing"

	"github.com/opzero/opzero/internal/keyq"
)

// TestClaim: a run that claims its key's follow-up serves the submissions
// made since it started: their tickets complete with its error, their
// payloads come after its own in arrival order, and no follow-up runs.
// Submissions after the claim still make one follow-up.
func TestClaim(t *testing.T) {
	var q *keyq.Queue[string, int]
	claimNow, claimed := make(chan struct{}), make(chan []int, 1)
	g := newGate()
	q = keyq.New(keyq.Options{MaxConcurrent: 2}, func(ctx context.Context, key string, payloads []int) error {
		if key == "k" && payloads[0] == 0 {
			g.started <- "k before the claim"
			<-claimNow
			claimed <- q.Claim(key)
		}
		return g.run(ctx, key, payloads)
	})
	first := q.Submit("k", 0)
	if s := g.next(t); s != "k before the claim" {
		t.Fatalf("started %q", s)
	}
	during := []*keyq.Ticket{q.Submit("k", 1), q.Submit("k", 2)}
	close(claimNow)
	if got := <-claimed; !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Claim = %v, want [1 2]", got)
	}
	g.next(t) // the run goes on after its claim
	if n := q.Len(); n != 1 {
		t.Fatalf("Len = %d after the claim, want 1 (the run; no follow-up)", n)
	}
	after := q.Submit("k", 3)
	g.release <- struct{}{}
	for i, tk := range append([]*keyq.Ticket{first}, during...) {
		if err := tk.Err(); err == nil || err.Error() != "run 1 of k" {
			t.Fatalf("ticket %d: %v, want the claiming run's error", i, err)
		}
	}
	g.next(t)
	g.release <- struct{}{}
	if err := after.Err(); err == nil || err.Error() != "run 2 of k" {
		t.Fatalf("ticket submitted after the claim: %v, want the follow-up's error", err)
	}
	if runs := g.runsSoFar(); len(runs) != 2 || !slices.Equal(runs[0], []int{0}) || !slices.Equal(runs[1], []int{3}) {
		t.Fatalf("runs %v, want [[0] [3]]: the claimed payloads made no run of their own", runs)
	}
	assertIdle(t, q)
}

// TestClaimLeavesOthersAlone: Claim takes nothing from a key that is not
// running (its queued run keeps its submissions) or has nothing pending.
func TestClaimLeavesOthersAlone(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{MaxConcurrent: 1}, g.run)
	a := q.Submit("a", 1)
	g.next(t)
	if got := q.Claim("a"); got != nil {
		t.Fatalf("Claim(a) with nothing pending = %v, want nil", got)
	}
	b := q.Submit("b", 2) // queued behind a: one slot
	if got := q.Claim("b"); got != nil {
		t.Fatalf("Claim(b) of a queued run = %v, want nil", got)
	}
	if got := q.Claim("nobody"); got != nil {
		t.Fatalf("Claim of an unknown key = %v, want nil", got)
	}
	g.release <- struct{}{}
	if err := a.Err(); err == nil || err.Error() != "run 1 of a" {
		t.Fatalf("a: %v", err)
	}
	if k := g.next(t); k != "b" {
		t.Fatalf("next run %q, want b", k)
	}
	g.release <- struct{}{}
	if err := b.Err(); err == nil || err.Error() != "run 2 of b" {
		t.Fatalf("b: %v, want its own run's error", err)
	}
	assertIdle(t, q)
}
