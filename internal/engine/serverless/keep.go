// keep.go: a key's Lease kept, not released, between the key's runs while
// its events keep coming (Options.LeaseKeepIdle), so a stream costs two
// Lease writes, not two per reconcile.

package serverless

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/lease"
)

// kept is a key's Lease that this instance holds across its runs
// (Options.LeaseKeepIdle): renewed by KeepAlive from the first run that
// took it until it is released, when the key has had no run for
// LeaseKeepIdle, or on shutdown. Only runs of its key (serialized by the
// queue) use it.
type kept struct {
	held *lease.Held
	stop func() // stops KeepAlive

	mu     sync.Mutex
	lost   bool                    // KeepAlive found it taken by another instance
	cancel context.CancelCauseFunc // the run in progress, nil between runs
	idle   clock.Timer             // submits the release once idle
	seq    int                     // which idle period the release is for
}

// keep starts renewing held for its key's runs; seq numbers its first
// idle period.
func keep(held *lease.Held, seq int) *kept {
	k := &kept{held: held, seq: seq}
	k.stop = held.KeepAlive(context.Background(), func(err error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.lost = true
		if k.cancel != nil {
			k.cancel(err)
		}
	})
	return k
}

// during ties ctx's run to the Lease: a loss cancels it. end, when the run
// is over.
func (k *kept) during(cancel context.CancelCauseFunc) (end func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost {
		cancel(lease.ErrLost)
	}
	k.cancel = cancel
	return func() {
		k.mu.Lock()
		k.cancel = nil
		k.mu.Unlock()
	}
}

func (k *kept) isLost() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// keeper holds the kept Leases of idle keys.
type keeper struct {
	mu     sync.Mutex
	m      map[reconcile.Request]*kept
	closed bool // shutting down: nothing more is kept
}

// take removes key's kept Lease and stops its idle timer. With seq >= 0
// (a release), only if it is still the idle period seq: a run since has
// made that release stale. nil if there is none.
func (kp *keeper) take(key reconcile.Request, seq int) *kept {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	k := kp.m[key]
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if seq >= 0 && k.seq != seq {
		return nil
	}
	delete(kp.m, key)
	if k.idle != nil {
		k.idle.Stop()
		k.idle = nil
	}
	k.seq++
	return k
}

// put keeps key's Lease for its next run; after idle without one, release
// is called with the idle period's seq. false when shutting down: release
// it now instead.
func (kp *keeper) put(c backoff.Clock, key reconcile.Request, k *kept, idle time.Duration, release func(seq int)) bool {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.closed {
		return false
	}
	if kp.m == nil {
		kp.m = map[reconcile.Request]*kept{}
	}
	kp.m[key] = k
	k.mu.Lock()
	seq := k.seq
	k.idle = c.AfterFunc(idle, func() { release(seq) })
	k.mu.Unlock()
	return true
}

// close keeps nothing more and returns the idle periods of what is kept:
// the releases to run before shutting down.
func (kp *keeper) close() map[reconcile.Request]int {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	kp.closed = true
	out := map[reconcile.Request]int{}
	for key, k := range kp.m {
		k.mu.Lock()
		out[key] = k.seq
		k.mu.Unlock()
	}
	return out
}

// has reports whether key's Lease is kept.
func (kp *keeper) has(key reconcile.Request) bool {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return kp.m[key] != nil
}

// until is when key's kept Lease runs out unless renewed, if it is kept.
func (kp *keeper) until(key reconcile.Request) (time.Time, bool) {
	kp.mu.Lock()
	k := kp.m[key]
	kp.mu.Unlock()
	if k == nil || k.isLost() {
		return time.Time{}, false
	}
	return k.held.Expires(), true
}

// Kept is the number of keys whose Lease this instance keeps between runs.
func (e *Engine) Kept() int {
	e.keeper.mu.Lock()
	defer e.keeper.mu.Unlock()
	return len(e.keeper.m)
}
