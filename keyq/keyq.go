package keyq

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// ErrShutdown completes tickets whose run will not happen.
var ErrShutdown = errors.New("keyq: shut down before the run started")

// RunFunc runs key with the payloads submitted since the previous run of
// key started (never empty, in arrival order).
type RunFunc[K comparable, V any] func(ctx context.Context, key K, payloads []V) error

// Options tunes a Queue.
type Options struct {
	// MaxConcurrent bounds the keys running at once; <= 0 means 1.
	MaxConcurrent int
	// Context is the parent of every run's context (Background if nil).
	Context context.Context
}

// Queue runs work per key: see the package documentation.
type Queue[K comparable, V any] struct {
	run RunFunc[K, V]
	max int

	mu      sync.Mutex
	keys    map[K]*keyState[V] // keys with a queued, running or pending run
	ready   []K                // keys whose next run waits for a slot, FIFO
	running int
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	idle    *sync.Cond // signalled when running drops
}

// keyState is a key with work. next is the batch that the key's next run
// will take; it is queued (in ready) unless the key is running, in which
// case it is the pending follow-up.
type keyState[V any] struct {
	running bool
	queued  bool
	next    *batch[V]
}

// batch is the payloads and tickets one run serves.
type batch[V any] struct {
	payloads []V
	tickets  []*Ticket
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
	q := &Queue[K, V]{run: run, max: opts.MaxConcurrent, keys: map[K]*keyState[V]{}}
	q.ctx, q.cancel = context.WithCancel(parent)
	q.idle = sync.NewCond(&q.mu)
	return q
}

// Submit registers payload for key; see the package documentation.
func (q *Queue[K, V]) Submit(key K, payload V) *Ticket {
	t := newTicket()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		t.complete(ErrShutdown)
		return t
	}
	ks := q.keys[key]
	if ks == nil {
		ks = &keyState[V]{}
		q.keys[key] = ks
	}
	if ks.next == nil {
		ks.next = &batch[V]{}
	}
	ks.next.payloads = append(ks.next.payloads, payload)
	ks.next.tickets = append(ks.next.tickets, t)
	if !ks.running && !ks.queued {
		ks.queued = true
		q.ready = append(q.ready, key)
	}
	q.dispatchLocked()
	return t
}

// dispatchLocked starts queued keys while slots are free.
func (q *Queue[K, V]) dispatchLocked() {
	for q.running < q.max && len(q.ready) > 0 {
		key := q.ready[0]
		q.ready = q.ready[1:]
		ks := q.keys[key]
		ks.queued, ks.running = false, true
		b := ks.next
		ks.next = nil
		q.running++
		go q.execute(key, b)
	}
}

func (q *Queue[K, V]) execute(key K, b *batch[V]) {
	err := q.safeRun(key, b.payloads)
	for _, t := range b.tickets {
		t.complete(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	ks := q.keys[key]
	ks.running = false
	switch {
	case ks.next != nil && q.closed:
		for _, t := range ks.next.tickets {
			t.complete(ErrShutdown)
		}
		delete(q.keys, key)
	case ks.next != nil: // the follow-up: queue it behind keys already waiting
		ks.queued = true
		q.ready = append(q.ready, key)
	default:
		delete(q.keys, key)
	}
	q.dispatchLocked()
	q.idle.Broadcast()
}

func (q *Queue[K, V]) safeRun(key K, payloads []V) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in run of %v: %v\n%s", key, r, debug.Stack())
		}
	}()
	return q.run(q.ctx, key, payloads)
}

// Shutdown stops accepting work, completes tickets of runs that have not
// started with ErrShutdown, and waits for started runs to finish. If ctx
// ends first, it cancels the runs' context and returns ctx's error.
func (q *Queue[K, V]) Shutdown(ctx context.Context) error {
	q.mu.Lock()
	q.closed = true
	for _, key := range q.ready {
		ks := q.keys[key]
		for _, t := range ks.next.tickets {
			t.complete(ErrShutdown)
		}
		ks.next, ks.queued = nil, false
		if !ks.running {
			delete(q.keys, key)
		}
	}
	q.ready = nil
	q.mu.Unlock()

	done := make(chan struct{})
	go func() {
		q.mu.Lock()
		for q.running > 0 {
			q.idle.Wait()
		}
		q.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		q.cancel()
		return nil
	case <-ctx.Done():
		q.cancel()
		return fmt.Errorf("keyq: runs still in progress: %w", ctx.Err())
	}
}

// Stats reports the keys running and waiting for a slot.
func (q *Queue[K, V]) Stats() (running, queued, keys int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running, len(q.ready), len(q.keys)
}
