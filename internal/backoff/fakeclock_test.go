package backoff_test

import (
	"testing"
	"time"

	"github.com/opzero/opzero/internal/backoff"
)

// TestFakeClock: timers fire in due order, reading their due time; Stop
// reports whether it prevented the call.
func TestFakeClock(t *testing.T) {
	c := backoff.NewFakeClock(epoch)
	var got []time.Duration
	record := func() { got = append(got, c.Now().Sub(epoch)) }
	c.AfterFunc(3*time.Second, record)
	c.AfterFunc(time.Second, record)
	stopped := c.AfterFunc(2*time.Second, record)
	fired := c.AfterFunc(-time.Second, record) // already due: next Step

	c.Step(0)
	if len(got) != 1 || got[0] != 0 {
		t.Fatalf("Step(0) fired %v, want only the overdue timer, at +0", got)
	}
	if fired.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop must return true once, then false")
	}
	c.Step(10 * time.Second)
	if want := []time.Duration{0, time.Second, 3 * time.Second}; len(got) != 3 || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("fired at %v, want %v", got, want)
	}
	if now := c.Now(); !now.Equal(epoch.Add(10 * time.Second)) {
		t.Fatalf("Now = +%s after the Steps, want +10s", now.Sub(epoch))
	}
	if n := c.Timers(); n != 0 {
		t.Fatalf("%d timers left", n)
	}
}

// TestFakeClockReset: Reset moves a pending timer and revives a fired one.
func TestFakeClockReset(t *testing.T) {
	c := backoff.NewFakeClock(epoch)
	n := 0
	tm := c.AfterFunc(time.Second, func() { n++ })
	if !tm.Reset(3 * time.Second) {
		t.Fatal("Reset of a pending timer returned false")
	}
	c.Step(2 * time.Second)
	if n != 0 {
		t.Fatal("the timer fired at its old due time")
	}
	c.Step(time.Second)
	if n != 1 {
		t.Fatalf("fired %d times by its new due time, want 1", n)
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer returned true")
	}
	c.Step(time.Second)
	if n != 2 {
		t.Fatalf("fired %d times after the Reset of a fired timer, want 2", n)
	}
}
