package backoff

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Tracker keeps, per key, a failure count and at most one pending timer that
// calls fire(key). The earliest due time wins. See the package documentation.
type Tracker[K comparable] struct {
	policy Policy
	clock  Clock
	fire   func(K)

	mu sync.Mutex
	// attempts counts each key's failures since its last Success.
	attempts map[K]int
	// timers holds each key's pending timer; an entry is dropped when the
	// timer fires or is cancelled.
	timers  map[K]*pending
	stopped bool // set by Stop: nothing is scheduled any more
}

// pending is one scheduled call of fire.
type pending struct {
	due   time.Time
	timer clock.Timer
}

// NewTracker returns a Tracker that calls fire(key) when key's timer is due,
// from the clock's goroutine and without holding any lock of the Tracker
// (fire may call the Tracker). A nil c means RealClock().
func NewTracker[K comparable](p Policy, c Clock, fire func(K)) *Tracker[K] {
	if c == nil {
		c = RealClock()
	}
	return &Tracker[K]{policy: p, clock: c, fire: fire, attempts: map[K]int{}, timers: map[K]*pending{}}
}

// Failure counts a failure of key and schedules fire(key) after
// Policy.Delay(attempt), where attempt is the number of failures of key
// before this one (0 for the first). If a timer for key is already due
// earlier, it is kept. Failure returns the time until key's timer fires
// (at most the policy's delay) and attempt.
//
// A failure while a retry of key is pending (a reconcile of an event that
// came before the retry was due, most often the echo of the failed
// reconcile's own status write) is not counted: the backoff grows by the
// retries' own failures, not by events, and the pending retry stays.
func (t *Tracker[K]) Failure(key K) (delay time.Duration, attempt int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	attempt = t.attempts[key]
	if p, ok := t.timers[key]; ok && attempt > 0 && !t.stopped {
		if now := t.clock.Now(); p.due.After(now) {
			return p.due.Sub(now), attempt - 1
		}
	}
	t.attempts[key] = attempt + 1
	return t.scheduleLocked(key, t.policy.Delay(attempt)), attempt
}

// After schedules fire(key) after d (a RequeueAfter), unless a timer for key
// is already due earlier. It leaves the failure count alone.
func (t *Tracker[K]) After(key K, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.scheduleLocked(key, d)
}

// scheduleLocked makes key's timer due after d unless it is due earlier, and
// returns the time until key's timer fires.
func (t *Tracker[K]) scheduleLocked(key K, d time.Duration) time.Duration {
	if t.stopped {
		return d
	}
	now := t.clock.Now()
	due := now.Add(d)
	if p, ok := t.timers[key]; ok {
		if !p.due.After(due) {
			return p.due.Sub(now) // an earlier (or equal) timer wins
		}
		p.timer.Stop()
	}
	p := &pending{due: due}
	t.timers[key] = p
	p.timer = t.clock.AfterFunc(d, func() { t.fired(key, p) })
	return d
}

// fired runs when p's timer is due: it drops the entry and calls fire unless
// p was cancelled or replaced meanwhile (a Stop that came too late).
func (t *Tracker[K]) fired(key K, p *pending) {
	t.mu.Lock()
	current := t.timers[key] == p
	if current {
		delete(t.timers, key)
	}
	t.mu.Unlock()
	if current {
		t.fire(key)
	}
}

// Success forgets key: its failure count and its pending timer, which is
// cancelled (a later success cancels a pending retry or requeue).
func (t *Tracker[K]) Success(key K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.attempts, key)
	if p, ok := t.timers[key]; ok {
		p.timer.Stop()
		delete(t.timers, key)
	}
}

// Pending reports when key's timer is due, if it has one.
func (t *Tracker[K]) Pending(key K) (due time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.timers[key]
	if !ok {
		return time.Time{}, false
	}
	return p.due, true
}

// Attempts is the number of failures of key since its last Success.
func (t *Tracker[K]) Attempts(key K) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.attempts[key]
}

// Len is the number of keys the Tracker holds state for: with a failure
// count, a pending timer, or both.
func (t *Tracker[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.attempts)
	for key := range t.timers {
		if _, ok := t.attempts[key]; !ok {
			n++
		}
	}
	return n
}

// Stop cancels every pending timer; later Failure and After calls still
// count failures but schedule nothing. Success keeps forgetting keys.
func (t *Tracker[K]) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for key, p := range t.timers {
		p.timer.Stop()
		delete(t.timers, key)
	}
}
