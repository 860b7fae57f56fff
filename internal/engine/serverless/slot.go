package serverless

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Reconcile slots. Options.MaxConcurrentReconciles bounds the reconciler
// calls at once. Without a Locker the per-key queue's own bound is that
// number, and a run is one reconcile. With a Locker a run also takes the
// key's Lease before it and keeps or releases it after, and an idle key's
// release is a run of its own: those writes must not hold a reconcile
// slot, or an instance with one slot (containerConcurrency 1) spends
// ~10 ms of every key's ~60 ms on them. So the queue then runs up to
// twice MaxConcurrentReconciles keys, and a run takes one of
// MaxConcurrentReconciles slots only around its reconcile
// (reconcileInSlot): while a key reconciles, another can take its Lease
// and wait for the slot, or release an idle one. Per key nothing changes:
// the Lease and its reconciles are still one run of the key at a time.

// slots is a counting semaphore; blocked acquirers are served in order.
type slots chan struct{}

func (s slots) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (s slots) release() { <-s }

// queueRuns is the per-key queue's bound on runs at once: with a Locker,
// MaxConcurrentReconciles reconciling and as many more taking, releasing
// or holding a Lease while they wait for a slot.
func (o Options) queueRuns() int {
	if o.Locker != nil {
		return 2 * o.MaxConcurrentReconciles
	}
	return o.MaxConcurrentReconciles
}

// reconcileInSlot is runOnce in a reconcile slot. The events that arrived
// for key while its run waited for the slot join this reconcile (the
// queue's Claim), as they would have joined a run still queued.
func (e *Engine) reconcileInSlot(ctx context.Context, key reconcile.Request, arrivals []*arrival) *Verdict {
	if err := e.slots.acquire(ctx); err != nil {
		return unavailableVerdict(key, fmt.Errorf("waiting for a reconcile slot: %w", err))
	}
	defer e.slots.release()
	if more := e.queue.Claim(key); len(more) > 0 {
		e.claims.add(key, countAdmitted(more))
		arrivals = append(slices.Clip(arrivals), more...)
	}
	return e.runOnce(ctx, key, arrivals)
}

// claims counts, per key whose run is in progress, the arrivals answered
// at admission that the run claimed: run settles them with its own.
type claims struct {
	mu sync.Mutex
	m  map[reconcile.Request]int64
}

func (c *claims) add(key reconcile.Request, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[reconcile.Request]int64{}
	}
	c.m[key] += n
}

// take returns and forgets key's count.
func (c *claims) take(key reconcile.Request) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.m[key]
	delete(c.m, key)
	return n
}
