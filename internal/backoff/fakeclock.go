package backoff

import (
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// FakeClock is a Clock that moves only when stepped. AfterFunc callbacks run
// synchronously inside Step, in due order, so a test knows that every timer
// due by the new time has fired when Step returns. It is safe for concurrent
// use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // neither fired nor stopped
}

var (
	_ Clock       = (*FakeClock)(nil)
	_ clock.Timer = (*fakeTimer)(nil)
)

type fakeTimer struct {
	c   *FakeClock
	due time.Time
	f   func()
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now is the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc registers f to run from the Step that brings the clock to at
// least now+d. A d <= 0 fires on the next Step, even Step(0).
func (c *FakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, due: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// C is nil: an AfterFunc timer has no channel, as with time.AfterFunc.
func (t *fakeTimer) C() <-chan time.Time { return nil }

// Reset makes the timer due d from now, whether it had fired, been stopped
// or was pending, and reports whether it was pending.
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	pending := t.c.removeLocked(t)
	t.due = t.c.now.Add(d)
	t.c.timers = append(t.c.timers, t)
	return pending
}

// Stop removes the timer if it has neither fired nor been stopped.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.c.removeLocked(t)
}

func (c *FakeClock) removeLocked(t *fakeTimer) bool {
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}

// Step advances the clock by d, firing on the way every timer due by the
// new time, earliest first. The clock reads each timer's due time while its
// callback runs, as a real clock would, and the new time once Step returns.
// Callbacks run one at a time without the clock's lock held: a callback may
// use the clock, and a timer it registers that falls due within this Step
// fires within it.
func (c *FakeClock) Step(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		t := c.popDue(target)
		if t == nil {
			return
		}
		t.f()
	}
}

// popDue removes and returns the earliest timer due by target, moving the
// clock to its due time; with none left, it moves the clock to target and
// returns nil.
func (c *FakeClock) popDue(target time.Time) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next *fakeTimer
	for _, t := range c.timers {
		if !t.due.After(target) && (next == nil || t.due.Before(next.due)) {
			next = t
		}
	}
	if next == nil {
		c.now = later(c.now, target)
		return nil
	}
	c.removeLocked(next)
	c.now = later(c.now, next.due)
	return next
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Timers is the number of timers that have neither fired nor been stopped.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
