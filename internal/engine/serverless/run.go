package serverless

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/standin"
)

var errTimeout = errors.New("reconcile timed out")

// handOffMargin is how long after a foreign Lease's expiry this instance
// looks at it again.
const handOffMargin = 250 * time.Millisecond

// run is the queue's RunFunc: one reconcile of key, never concurrent with
// another of the same key (across instances too, with a Locker). arrivals
// are the events folded into this run (with a Locker, also those it claims
// while it waits for a reconcile slot: slot.go). Its error is always its
// *Verdict.
// If an arrival was answered at admission and the run could not happen
// (Unavailable, and nothing scheduled), the key is submitted again after
// its backoff: no sender will deliver it again.
func (e *Engine) run(ctx context.Context, key reconcile.Request, arrivals []*arrival) error {
	v := e.runLocked(ctx, key, arrivals)
	n := countAdmitted(arrivals) + e.claims.take(key)
	if n == 0 {
		return v
	}
	e.admitted.Add(-n)
	if v.Outcome == Unavailable && v.Next == 0 {
		d, _ := e.readmit.Failure(key)
		e.log.Info("an event answered at admission could not be reconciled; retrying", "key", key.String(), "error", v.Error(), "retryIn", d)
	} else {
		e.readmit.Success(key)
	}
	return v
}

func countAdmitted(arrivals []*arrival) (n int64) {
	for _, a := range arrivals {
		if a != nil && a.admitted {
			n++
		}
	}
	return n
}

// runLocked is run: with the key's Lease when there is a Locker. The Lease
// is taken by the first run of a key, kept across its runs while they keep
// coming (Options.LeaseKeepIdle), and released when idle or on shutdown.
func (e *Engine) runLocked(ctx context.Context, key reconcile.Request, arrivals []*arrival) *Verdict {
	if e.opts.Locker == nil {
		return e.runOnce(ctx, key, arrivals)
	}
	if e.sole != nil && !keyLeaseNeeded(arrivals) && !e.keeper.has(key) {
		r, rctx, err := e.sole.enter(ctx)
		var he *lease.HeldElsewhere
		switch {
		case r != nil:
			defer r.exit()
			return e.reconcileInSlot(rctx, key, arrivals)
		case errors.As(err, &he):
			if !e.forwardable(arrivals, he) && !onlyChecks(arrivals) {
				// Rather than 503: wait a moment for the holder, asked to
				// step down, to let go (a draining instance does soon).
				if r, rctx := e.sole.awaitHandOver(ctx); r != nil {
					defer r.exit()
					return e.reconcileInSlot(rctx, key, arrivals)
				}
			}
			return e.soleVerdict(ctx, key, arrivals, he)
		case !errors.Is(err, errNotAlone):
			e.log.Error(err, "taking the operator's sole lease", "key", key.String())
			return unavailableVerdict(key, fmt.Errorf("taking the operator's sole Lease: %w", err))
		}
	}
	if seq, ok := onlyRelease(arrivals); ok {
		k := e.keeper.take(key, seq)
		if k == nil {
			return &Verdict{Key: key, Outcome: Reconciled, Note: "its Lease was used again since"}
		}
		return e.withLease(ctx, key, k, nil, false)
	}
	k := e.keeper.take(key, -1)
	if k != nil && (k.isLost() || k.held.Refresh(ctx) != nil) {
		// Taken by another instance, or its renewal failed: take it anew.
		k.stop()
		k = nil
	}
	if k != nil && onlyChecks(arrivals) {
		// A look at the Lease another instance held when an event came:
		// this instance has taken it since, in a run that started after.
		return e.withLease(ctx, key, k, nil, true)
	}
	if k == nil {
		var held *lease.Held
		var err error
		if onlyChecks(arrivals) {
			if held, err = e.opts.Locker.TakeOverIfAbandoned(ctx, key); held == nil && err == nil {
				return &Verdict{Key: key, Outcome: Reconciled, Note: "released by its holder, which reconciled it"}
			}
		} else {
			held, err = e.acquire(ctx, key, arrivals)
		}
		var elsewhere *lease.HeldElsewhere
		switch {
		case errors.As(err, &elsewhere):
			return e.handOff(ctx, key, arrivals, elsewhere)
		case err != nil:
			e.log.Error(err, "taking the lease", "key", key.String())
			return unavailableVerdict(key, fmt.Errorf("taking its Lease: %w", err))
		}
		k = keep(held, 0)
	}
	return e.withLease(ctx, key, k, arrivals, true)
}

// withLease reconciles key under its Lease k (if there are arrivals), then
// keeps k for the key's next run (if it may) or releases it. A release that
// finds the Lease marked by another instance reconciles again, from the API
// server, and may keep it again.
func (e *Engine) withLease(ctx context.Context, key reconcile.Request, k *kept, arrivals []*arrival, mayKeep bool) *Verdict {
	v := &Verdict{Key: key, Outcome: Reconciled, Note: "nothing to reconcile; its Lease is released or kept"}
	for {
		if len(arrivals) > 0 {
			rctx, cancel := context.WithCancelCause(ctx)
			end := k.during(cancel)
			v = e.reconcileInSlot(rctx, key, arrivals)
			end()
			cancel(nil)
		}
		if mayKeep && e.opts.LeaseKeepIdle > 0 && !k.isLost() && e.keeper.put(e.opts.Clock, key, k, e.opts.LeaseKeepIdle, func(seq int) {
			e.queue.Submit(key, &arrival{release: true, seq: seq})
		}) {
			return v
		}
		k.stop()
		// Released even if ctx has ended (shutdown deadline): a Lease left
		// behind would hold the key until it expires.
		rel, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		dirty, err := k.held.Release(rel)
		relCancel()
		if err != nil && !errors.Is(err, lease.ErrLost) {
			e.log.Error(err, "releasing the lease; it expires by itself", "key", key.String())
		}
		if !dirty {
			return v
		}
		// Another instance acknowledged an event for key while this one
		// held the Lease: reconcile again, from the API server (no
		// stand-in). The mark is cleared and the Lease still held.
		e.stats.Reruns.Add(1)
		k = keep(k.held, k.seq+1)
		arrivals, mayKeep = []*arrival{{reason: "marked by another instance"}}, true
	}
}

// onlyRelease: the arrivals are only idle releases of a kept Lease; seq is
// the idle period of the latest.
func onlyRelease(arrivals []*arrival) (seq int, ok bool) {
	for _, a := range arrivals {
		if a == nil || !a.release {
			return 0, false
		}
		seq = a.seq
	}
	return seq, len(arrivals) > 0
}

// keyLeaseNeeded: a run of arrivals takes its key's own Lease even while
// this instance runs alone: a kept Lease's release, a look at a Lease's
// expiry, a key a sweep found with an expired Lease (taking it over
// deletes it once reconciled).
func keyLeaseNeeded(arrivals []*arrival) bool {
	for _, a := range arrivals {
		if a != nil && (a.release || a.check || a.keyLease) {
			return true
		}
	}
	return false
}

func onlyChecks(arrivals []*arrival) bool {
	for _, a := range arrivals {
		if a == nil || !a.check {
			return false
		}
	}
	return true
}

// handOff leaves key to the live holder of its Lease and arranges to look
// again when the Lease expires: in-process, and durably with durable time
// (this instance may scale to zero first).
func (e *Engine) handOff(ctx context.Context, key reconcile.Request, arrivals []*arrival, he *lease.HeldElsewhere) *Verdict {
	if he.Forward { // not marked: each request of the run forwards itself (forward.go)
		return forwardVerdict(key, he)
	}
	if he.Sole { // nothing marked: another instance runs alone (sole.go)
		return e.soleVerdict(ctx, key, arrivals, he)
	}
	e.stats.HandOffs.Add(1)
	return e.lookAgain(ctx, key, he)
}

// lookAgain arranges to look at the Lease he found again at its expiry,
// in-process and durably with durable time, and says the key is handed off.
func (e *Engine) lookAgain(ctx context.Context, key reconcile.Request, he *lease.HeldElsewhere) *Verdict {
	e.obs.HandOff()
	wait := max(time.Until(he.Expires)+handOffMargin, handOffMargin)
	if e.opts.Durable != nil {
		if err := e.opts.Durable.Accept(ctx, key, wait); err != nil {
			return unavailableVerdict(key, fmt.Errorf("%s holds it, and the look at its expiry could not be recorded: %w", he.Holder, err))
		}
	}
	e.checks.After(key, wait)
	return &Verdict{Key: key, Outcome: HandedOff,
		Note: fmt.Sprintf("being reconciled by %s, which reconciles again before releasing it", he.Holder)}
}

// runOnce is one reconcile of key, then the settling of its result.
func (e *Engine) runOnce(ctx context.Context, key reconcile.Request, arrivals []*arrival) *Verdict {
	st := standin.New(e.op.Primary.GVK, key.NamespacedName, e.standIn(key, arrivals), e.versions)
	if e.cache != nil {
		st.WithCache(e.cache)
	}
	ctx, cancel := context.WithTimeoutCause(standin.With(ctx, st), e.opts.ReconcileTimeout, errTimeout)
	defer cancel()
	ctx, obs := e.obs.Reconcile(ctx, key.String(), arrivalsOf(arrivals))
	ctx = log.IntoContext(ctx, e.logger(key, arrivals).WithValues(obs.LogValues()...))
	e.stats.Reconciles.Add(1)
	res, err := e.reconcile(ctx, key)
	if err != nil && apierrors.IsConflict(err) && st.FromMemory() {
		// A write conflicted after a Get was answered from memory: the
		// event's object (or the cache's) was older than the API server's,
		// e.g. another instance wrote the key since that event was sent. A
		// GET would have read the newest, so reconcile once more at once
		// with every read going to the API server, as Reference mode would
		// have, instead of failing into a retry with backoff.
		e.stats.MemoryConflicts.Add(1)
		log.FromContext(ctx).V(1).Info("a write conflicted after a read answered from an event's object; reconciling again from the API server", "error", err.Error())
		st = standin.New(e.op.Primary.GVK, key.NamespacedName, nil, e.versions)
		ctx = standin.With(ctx, st)
		e.stats.Reconciles.Add(1)
		res, err = e.reconcile(ctx, key)
	}
	v := e.settle(ctx, key, st, res, err)
	observed(obs, res, v)
	return v
}

// standIn is the object that answers the reconcile's first Get of key: the
// newest that arrived in an event, unless this instance has read or written
// a version of key that it cannot tell is older (standin.Versions): then nil,
// and the first Get goes to the API server.
func (e *Engine) standIn(key reconcile.Request, arrivals []*arrival) []byte {
	var newest *arrival
	for _, a := range arrivals {
		if a != nil && a.object != nil {
			newest = a
		}
	}
	if newest == nil || !e.versions.Current(key.NamespacedName, newest.version) {
		return nil
	}
	return newest.object
}

// logger is the reconcile's logger, with the values controller-runtime's
// controller puts in its context (so that log.FromContext in a reconciler
// reads the same in both modes), and why it runs.
func (e *Engine) logger(key reconcile.Request, arrivals []*arrival) logr.Logger {
	gvk := e.op.Primary.GVK
	var why []string
	for _, a := range arrivals {
		if a != nil && a.reason != "" && !slices.Contains(why, a.reason) {
			why = append(why, a.reason)
		}
	}
	return e.log.WithValues("controller", e.op.Name, "controllerGroup", gvk.Group, "controllerKind", gvk.Kind,
		gvk.Kind, klog.KRef(key.Namespace, key.Name), "namespace", key.Namespace, "name", key.Name,
		"reconcileID", uuid.NewUUID(), "reason", strings.Join(why, "; "))
}

// reconcile calls the reconciler; a panic counts as a failed reconcile
// (retried with backoff), as in controller-runtime.
func (e *Engine) reconcile(ctx context.Context, key reconcile.Request) (res reconcile.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
			log.FromContext(ctx).Error(err, "reconciler panicked", "stack", string(debug.Stack()))
		}
	}()
	return e.op.Reconciler.Reconcile(ctx, key)
}
