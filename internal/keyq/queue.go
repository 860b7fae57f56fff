package keyq

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ErrShutdown completes the tickets of runs that will not happen because the
// queue was shut down.
var ErrShutdown = errors.New("keyq: shut down before the run started")

// errShutdownDeadline is the cause of the runs' context when Shutdown gives up.
var errShutdownDeadline = errors.New("keyq: shutdown deadline passed")

// errGoexit is the error of a run whose RunFunc called runtime.Goexit
// (t.FailNow in a test, for instance) instead of returning.
var errGoexit = errors.New("keyq: run exited without returning (runtime.Goexit)")

// RunFunc runs key with the payloads submitted since the previous run of key
// started: in arrival order, never empty. The slice belongs to the call.
type RunFunc[K comparable, V any] func(ctx context.Context, key K, payloads []V) error

// Options tunes a Queue.
type Options struct {
	// MaxConcurrent bounds the distinct keys running at once; <= 0 means 1.
	MaxConcurrent int
	// Context is the parent of every run's context (context.Background()
	// if nil). Cancelling it cancels the runs in progress but does not stop
	// the queue; Shutdown cancels the runs' context only once its own
	// context has ended.
	Context context.Context
	// Settle, if > 0, holds a follow-up run (one whose submissions arrived
	// while its key was running) until no submission for the key has
	// arrived for Settle, so that a burst still arriving when a run ends
	// folds into one follow-up instead of one per run it spans. A first run
	// (key idle) is never held.
	Settle time.Duration
	// MaxSettle bounds the hold: a follow-up is queued at most MaxSettle
	// after the run before it ended, even if submissions keep arriving
	// (10 x Settle if <= 0).
	MaxSettle time.Duration
	// Clock times Settle and MaxSettle (the wall clock if nil). Tests pass
	// k8s.io/utils/clock/testing's FakeClock and step it.
	Clock clock.WithDelayedExecution
}

// PanicError is the error of a run whose RunFunc panicked.
type PanicError struct {
	Key   any    // the key of the run
	Value any    // what was passed to panic
	Stack []byte // the stack of the panicking goroutine
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("keyq: run of %v panicked: %v", e.Key, e.Value)
}

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Queue runs a RunFunc per key: never two runs of one key at once,
// submissions during a run folded into one follow-up run, distinct keys in
// parallel up to Options.MaxConcurrent. See the package documentation.
type Queue[K comparable, V any] struct {
	run    RunFunc[K, V]
	max    int
	settle time.Duration // Options.Settle; 0: follow-ups queue at once
	maxSet time.Duration // Options.MaxSettle
	clock  clock.WithDelayedExecution
	ctx    context.Context // the parent of every run's context
	cancel context.CancelCauseFunc

	mu sync.Mutex
	// pending holds, per key, the batch its next run will take: every
	// submission since the key's last run started. A key is in pending
	// and not in running if and only if it is in ready or in settling.
	pending map[K]*batch[V]
	// settling holds the timers of follow-ups held until their key's
	// submissions pause (Options.Settle); such a key is in neither running
	// nor ready.
	settling map[K]*hold
	// running holds the batch of each key whose run is in progress (Claim
	// adds to it).
	running map[K]*batch[V]
	// ready lists, first come first served, the keys whose pending batch
	// waits for a free slot. A follow-up joins it when its key's run ends.
	ready []K

	closed  bool
	drained chan struct{} // closed once closed and nothing runs
	// refusing: Drain has begun; submissions are refused but what is
	// pending still runs. idle is closed once refusing and nothing is
	// running, queued, held or pending.
	refusing bool
	idle     chan struct{}
}

// batch is the payloads and tickets that one run serves.
type batch[V any] struct {
	payloads []V
	tickets  []*Ticket
	last     time.Time // the latest submission (kept only when settling is on)
	deadline time.Time // a held follow-up is queued by then at the latest
}

func (b *batch[V]) complete(err error) {
	for _, t := range b.tickets {
		t.complete(err)
	}
}

// New returns a Queue that calls run.
func New[K comparable, V any](opts Options, run RunFunc[K, V]) *Queue[K, V] {
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 1
	}
	parent := opts.Context
	if parent == nil {
		parent = context.Background()
	}
	if opts.Settle > 0 && opts.MaxSettle <= 0 {
		opts.MaxSettle = 10 * opts.Settle
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	q := &Queue[K, V]{
		run:      run,
		max:      opts.MaxConcurrent,
		settle:   opts.Settle,
		maxSet:   opts.MaxSettle,
		clock:    opts.Clock,
		pending:  map[K]*batch[V]{},
		running:  map[K]*batch[V]{},
		settling: map[K]*hold{},
		drained:  make(chan struct{}),
		idle:     make(chan struct{}),
	}
	q.ctx, q.cancel = context.WithCancelCause(parent)
	return q
}

// Submit registers payload for key and returns a Ticket that completes when
// a run of key that started after this call has finished. It never blocks.
// After Shutdown the ticket is already done with ErrShutdown.
func (q *Queue[K, V]) Submit(key K, payload V) *Ticket {
	t := newTicket()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.refusing {
		t.complete(ErrShutdown)
		return t
	}
	b, ok := q.pending[key]
	if !ok {
		b = &batch[V]{}
		q.pending[key] = b
		if _, running := q.running[key]; !running {
			q.ready = append(q.ready, key)
		}
	}
	b.payloads = append(b.payloads, payload)
	b.tickets = append(b.tickets, t)
	if q.settle > 0 {
		b.last = q.clock.Now()
	}
	q.dispatchLocked()
	return t
}

// Claim hands the run of key in progress the submissions made since it
// started: it returns their payloads, in arrival order, and their tickets
// complete with this run's error; they cause no follow-up run. It is for a
// RunFunc that waits for something after it has started (the serverless
// engine: a reconcile slot, once it holds the key's Lease) and wants what
// arrived meanwhile to be served by its work. nil if key has no run in
// progress or nothing was submitted since it started: a queued run's
// submissions are never taken, nor a held follow-up's (there is none while
// the key runs).
func (q *Queue[K, V]) Claim(key K) []V {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, running := q.running[key]
	next, pending := q.pending[key]
	if !running || !pending {
		return nil
	}
	delete(q.pending, key)
	cur.tickets = append(cur.tickets, next.tickets...) // cur.payloads is the RunFunc's: left alone
	return next.payloads
}

// dispatchLocked starts ready keys while slots are free.
func (q *Queue[K, V]) dispatchLocked() {
	for {
		key, b := q.takeLocked()
		if b == nil {
			return
		}
		go q.execute(key, b)
	}
}

// takeLocked moves the first ready key to running if a slot is free and
// returns it with its batch (nil: nothing to start).
func (q *Queue[K, V]) takeLocked() (K, *batch[V]) {
	var zero K
	if len(q.running) >= q.max || len(q.ready) == 0 {
		return zero, nil
	}
	key := q.ready[0]
	q.ready[0] = zero // let the key be collected
	q.ready = q.ready[1:]
	b := q.pending[key]
	delete(q.pending, key)
	q.running[key] = b
	return key, b
}

// execute runs b, and then, while a key is ready when a run ends, that
// key's run too: a goroutine that has run once keeps its grown stack for
// the next run. (One goroutine per run grew its stack anew every time:
// runtime.newstack was 5-8% of a serverless operator's CPU when it
// converged 2000 objects.)
func (q *Queue[K, V]) execute(key K, b *batch[V]) {
	for b != nil {
		key, b = q.executeOne(key, b)
	}
}

// executeOne runs one batch and then finishes it, even if run calls
// runtime.Goexit; it returns the run this goroutine does next (nil batch:
// none).
func (q *Queue[K, V]) executeOne(key K, b *batch[V]) (K, *batch[V]) {
	err, returned := errGoexit, false
	defer func() {
		if !returned { // runtime.Goexit: the ready keys get goroutines of their own
			q.finish(key, b, err, false)
		}
	}()
	err = q.call(key, b.payloads)
	returned = true
	return q.finish(key, b, err, true)
}

// call calls run, turning a panic into a *PanicError.
func (q *Queue[K, V]) call(key K, payloads []V) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Key: key, Value: r, Stack: debug.Stack()}
		}
	}()
	return q.run(q.ctx, key, payloads)
}

// finish releases key's slot, queues its follow-up if any, and then
// completes the run's tickets: once a ticket is done, the run it waited for
// no longer counts in Running. With next, the first ready key is returned
// for the caller to run (its slot taken), not given a goroutine.
func (q *Queue[K, V]) finish(key K, b *batch[V], err error, next bool) (K, *batch[V]) {
	q.mu.Lock()
	delete(q.running, key)
	if follow, ok := q.pending[key]; ok {
		follow.deadline = q.clock.Now().Add(q.maxSet)
		q.settleLocked(key, follow)
	}
	var nkey K
	var nb *batch[V]
	if next {
		nkey, nb = q.takeLocked()
	}
	q.dispatchLocked()
	q.drainedLocked()
	q.idleLocked()
	q.mu.Unlock()
	b.complete(err)
	return nkey, nb
}

// settleLocked queues key's follow-up behind the keys already waiting, once
// its submissions have paused for Options.Settle or its deadline has
// passed; until then a timer holds it.
func (q *Queue[K, V]) settleLocked(key K, b *batch[V]) {
	now := q.clock.Now()
	due := b.last.Add(q.settle)
	if b.deadline.Before(due) {
		due = b.deadline
	}
	if q.settle <= 0 || !now.Before(due) {
		q.ready = append(q.ready, key)
		return
	}
	h := &hold{}
	// A fake clock calls f while holding its own lock, so f must not use the
	// clock (settleLocked does): it hands over to a goroutine, as the real
	// clock's AfterFunc runs f in one anyway.
	h.timer = q.clock.AfterFunc(due.Sub(now), func() { go q.settled(key, h) })
	q.settling[key] = h
}

// hold is the timer of a held follow-up.
type hold struct{ timer clock.Timer }

// settled runs when the settle timer h of key fires: it queues key's
// follow-up, or holds it longer if submissions arrived meanwhile.
func (q *Queue[K, V]) settled(key K, h *hold) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.settling[key] != h {
		return // Shutdown has completed its tickets
	}
	delete(q.settling, key)
	q.settleLocked(key, q.pending[key])
	q.dispatchLocked()
}

// drainedLocked closes drained once the queue is closed and idle.
func (q *Queue[K, V]) drainedLocked() {
	if !q.closed || len(q.running) > 0 {
		return
	}
	select {
	case <-q.drained:
	default:
		close(q.drained)
	}
}

// idleLocked closes idle once Drain has begun and the queue holds nothing.
func (q *Queue[K, V]) idleLocked() {
	if !q.refusing || len(q.running) > 0 || len(q.pending) > 0 {
		return
	}
	select {
	case <-q.idle:
	default:
		close(q.idle)
	}
}

// Drain stops accepting submissions (they complete with ErrShutdown), lets
// every run already submitted happen (queued, held follow-ups, pending
// follow-ups), and then shuts the queue down. If ctx ends first, it is
// Shutdown with that ctx: what has not started completes with ErrShutdown.
func (q *Queue[K, V]) Drain(ctx context.Context) error {
	q.mu.Lock()
	q.refusing = true
	q.idleLocked()
	q.mu.Unlock()
	select {
	case <-q.idle:
	case <-ctx.Done():
	}
	return q.Shutdown(ctx)
}

// Shutdown stops accepting submissions and completes the tickets of every
// run that has not started (queued or pending follow-up) with ErrShutdown.
// Runs already started go on; Shutdown returns nil once they have finished.
// If ctx ends first, it cancels the runs' context and returns ctx's error,
// wrapped; the runs still finish in the background. Calling it again is
// safe.
func (q *Queue[K, V]) Shutdown(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	for key, b := range q.pending {
		b.complete(ErrShutdown)
		delete(q.pending, key)
	}
	for key, h := range q.settling {
		h.timer.Stop()
		delete(q.settling, key)
	}
	q.ready = nil
	q.drainedLocked()
	q.mu.Unlock()

	select {
	case <-q.drained: // checked first: an idle queue shuts down cleanly even if ctx has ended
	default:
		select {
		case <-q.drained:
		case <-ctx.Done():
			q.cancel(errShutdownDeadline)
			return fmt.Errorf("keyq: gave up waiting for runs in progress: %w", ctx.Err())
		}
	}
	q.cancel(ErrShutdown)
	return nil
}

// Running is the number of keys whose run is in progress.
func (q *Queue[K, V]) Running() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.running)
}

// Queued is the number of keys whose next run waits for a free slot. A
// follow-up pending behind its key's run in progress is not counted.
func (q *Queue[K, V]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// Len is the number of keys the queue holds state for: running, queued,
// settling or with a pending follow-up. It is 0 when the queue is idle.
func (q *Queue[K, V]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.running) + len(q.ready) + len(q.settling) // pending and not running = ready or settling
}
