package backoff

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Policy is exponential backoff with a cap.
type Policy struct {
	Base   time.Duration
	Cap    time.Duration
	Factor float64 // <= 1 means 2
	Jitter float64 // 0..1
}

// DefaultPolicy starts at 1 s and caps at 5 min: each retry of a serverless
// operator may cold-start a pod, so it starts slower than controller-runtime's
// 5 ms.
func DefaultPolicy() Policy { return Policy{Base: time.Second, Cap: 5 * time.Minute, Factor: 2} }

// Delay is the wait before retry number attempt (0-based).
func (p Policy) Delay(attempt int) time.Duration {
	f := p.Factor
	if f <= 1 {
		f = 2
	}
	if attempt < 0 {
		attempt = 0
	}
	d := float64(p.Base) * math.Pow(f, float64(attempt))
	if p.Cap > 0 && (d > float64(p.Cap) || math.IsInf(d, 0) || math.IsNaN(d)) {
		d = float64(p.Cap)
	}
	if d > math.MaxInt64 {
		d = math.MaxInt64
	}
	if p.Jitter > 0 {
		d -= d * math.Min(p.Jitter, 1) * rand.Float64()
	}
	return time.Duration(d)
}

// Clock is the time source.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// RealClock is the wall clock.
func RealClock() Clock { return realClock{} }

// Tracker keeps per-key failure counts and one pending timer per key.
type Tracker[K comparable] struct {
	policy Policy
	clock  Clock
	fire   func(K)

	mu       sync.Mutex
	attempts map[K]int
	timers   map[K]*pending
	stopped  bool
}

type pending struct {
	due   time.Time
	timer Timer
}

// NewTracker returns a Tracker that calls fire(key) when a key's timer is due.
func NewTracker[K comparable](p Policy, c Clock, fire func(K)) *Tracker[K] {
	return &Tracker[K]{policy: p, clock: c, fire: fire, attempts: map[K]int{}, timers: map[K]*pending{}}
}

// Failure counts a failure of key and schedules a retry after the policy's
// delay (unless an earlier one is pending). It returns the delay and the
// attempt number it used.
func (t *Tracker[K]) Failure(key K) (time.Duration, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	attempt := t.attempts[key]
	t.attempts[key] = attempt + 1
	d := t.policy.Delay(attempt)
	t.scheduleLocked(key, d)
	return d, attempt
}

// After schedules fire(key) after d (RequeueAfter), unless an earlier timer
// is pending. Failure counts are unchanged.
func (t *Tracker[K]) After(key K, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.scheduleLocked(key, d)
}

func (t *Tracker[K]) scheduleLocked(key K, d time.Duration) {
	if t.stopped {
		return
	}
	due := t.clock.Now().Add(d)
	if p, ok := t.timers[key]; ok {
		if !p.due.After(due) {
			return // an earlier (or equal) timer is pending: earliest wins
		}
		p.timer.Stop()
	}
	p := &pending{due: due}
	p.timer = t.clock.AfterFunc(d, func() {
		t.mu.Lock()
		if t.timers[key] != p { // replaced or cancelled meanwhile
			t.mu.Unlock()
			return
		}
		delete(t.timers, key)
		t.mu.Unlock()
		t.fire(key)
	})
	t.timers[key] = p
}

// Success forgets key's failures and cancels its pending timer.
func (t *Tracker[K]) Success(key K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.attempts, key)
	if p, ok := t.timers[key]; ok {
		p.timer.Stop()
		delete(t.timers, key)
	}
}

// Pending reports key's pending due time.
func (t *Tracker[K]) Pending(key K) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.timers[key]
	if !ok {
		return time.Time{}, false
	}
	return p.due, true
}

// Attempts is key's failure count since its last success.
func (t *Tracker[K]) Attempts(key K) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.attempts[key]
}

// Stop cancels every timer; later schedules are ignored.
func (t *Tracker[K]) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for k, p := range t.timers {
		p.timer.Stop()
		delete(t.timers, k)
	}
}
