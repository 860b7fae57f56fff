package serverless

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/outcome"
	"github.com/opzero/opzero/internal/standin"
)

// ReconcileError is what a waiting request learns of a failed reconcile.
type ReconcileError struct {
	Key      reconcile.Request
	Err      error
	Terminal bool
	// RetryIn is when the retry fires (not Terminal).
	RetryIn time.Duration
	// Recorded: the retry is durably recorded (Options.Durable): handled.
	Recorded bool
	// Unrecorded: the retry or requeue could not be recorded: the sender
	// must retry the event.
	Unrecorded bool
}

func (e *ReconcileError) Error() string {
	if e.Terminal {
		return fmt.Sprintf("%s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v (retry in %s)", e.Key, e.Err, e.RetryIn)
}

func (e *ReconcileError) Unwrap() error { return e.Err }

var errTimeout = errors.New("reconcile timed out")

// HandedOff is what a waiting request learns when another instance holds
// its key's Lease: the Lease is marked, so the holder reconciles again
// before it lets go (or, if it dies, this instance or the next event takes
// the expired Lease over). The event is handled.
type HandedOff struct {
	Key    reconcile.Request
	Holder string
}

func (h *HandedOff) Error() string {
	return fmt.Sprintf("%s: being reconciled by %s, which reconciles again before releasing it", h.Key, h.Holder)
}

// handOffMargin is how long after a foreign Lease's expiry this instance
// looks at it again.
const handOffMargin = 250 * time.Millisecond

// run is the queue's RunFunc: one reconcile of key, never concurrent with
// another of the same key (across instances too, with a Locker). arrivals
// are the events folded into this run.
func (e *Engine) run(ctx context.Context, key reconcile.Request, arrivals []*arrival) error {
	if e.opts.Locker == nil {
		return e.runOnce(ctx, key, arrivals)
	}
	var held *lease.Held
	var err error
	if onlyChecks(arrivals) {
		if held, err = e.opts.Locker.TakeOverIfAbandoned(ctx, key); held == nil && err == nil {
			return nil // released: its holder reconciled what was marked
		}
	} else {
		held, err = e.opts.Locker.Acquire(ctx, key)
	}
	var elsewhere *lease.HeldElsewhere
	switch {
	case errors.As(err, &elsewhere):
		return e.handOff(ctx, key, elsewhere)
	case err != nil:
		e.log.Error(err, "taking the lease", "key", key.String())
		return &ReconcileError{Key: key, Err: err, Unrecorded: true}
	}
	for {
		rctx, cancel := context.WithCancelCause(ctx)
		stop := held.KeepAlive(ctx, cancel)
		rerr := e.runOnce(rctx, key, arrivals)
		stop()
		cancel(nil)
		// Released even if ctx has ended (shutdown deadline): a Lease left
		// behind would hold the key until it expires.
		rel, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		dirty, err := held.Release(rel)
		relCancel()
		if err != nil && !errors.Is(err, lease.ErrLost) {
			e.log.Error(err, "releasing the lease; it expires by itself", "key", key.String())
		}
		if !dirty {
			return rerr
		}
		// Another instance acknowledged an event for key during the run:
		// reconcile again, from the API server (no stand-in).
		e.stats.Reruns.Add(1)
		arrivals = []*arrival{{reason: "marked by another instance"}}
	}
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
// again when the Lease expires: in-process, and durably when the store
// records accepted events (this instance may scale to zero first).
func (e *Engine) handOff(ctx context.Context, key reconcile.Request, he *lease.HeldElsewhere) error {
	e.stats.HandOffs.Add(1)
	wait := time.Until(he.Expires) + handOffMargin
	if wait < handOffMargin {
		wait = handOffMargin
	}
	if acc, ok := e.opts.Durable.(Acceptor); ok {
		if err := acc.Accept(ctx, key, wait); err != nil {
			return &ReconcileError{Key: key, Err: fmt.Errorf("%s holds it, and the look at its expiry could not be recorded: %w", he.Holder, err), Unrecorded: true}
		}
	}
	e.checks.After(key, wait)
	return &HandedOff{Key: key, Holder: he.Holder}
}

// runOnce is one reconcile of key and the settling of its result.
func (e *Engine) runOnce(ctx context.Context, key reconcile.Request, arrivals []*arrival) error {
	var newest []byte
	for _, a := range arrivals {
		if a != nil && a.object != nil {
			newest = a.object // the newest wins
		}
	}
	st := standin.New(e.op.Primary.GVK, key.NamespacedName, newest)
	ctx, cancel := context.WithTimeoutCause(standin.With(ctx, st), e.opts.ReconcileTimeout, errTimeout)
	defer cancel()
	e.stats.Reconciles.Add(1)
	res, err := e.reconcile(ctx, key)
	d := outcome.Decide(res, err)
	log := e.log.WithValues("key", key.String(), "outcome", d.Action.String())
	if e.opts.Durable != nil {
		return e.settleDurably(ctx, key, d)
	}
	switch d.Action {
	case outcome.Done, outcome.RequeueAfter:
		e.retries.Success(key) // a success cancels a pending retry
		if d.Action == outcome.RequeueAfter {
			e.retries.After(key, d.After)
		}
		if e.op.AutoObservedGeneration {
			if err := standin.SetObservedGeneration(ctx, e.c, e.op.Primary.GVK, key.NamespacedName, st.Generation()); err != nil {
				log.Error(err, "writing status.observedGeneration")
			}
		}
		return nil
	case outcome.Terminal:
		e.retries.Success(key)
		e.stats.Failures.Add(1)
		log.Error(d.Err, "reconcile failed terminally; not retried")
		return &ReconcileError{Key: key, Err: d.Err, Terminal: true}
	default:
		e.stats.Failures.Add(1)
		delay, attempt := e.retries.Failure(key)
		if d.Err == nil {
			d.Err = errors.New("Requeue requested")
		}
		log.Info("reconcile failed; retry scheduled", "error", d.Err.Error(), "attempt", attempt, "retryIn", delay)
		return &ReconcileError{Key: key, Err: d.Err, RetryIn: delay}
	}
}

// reconcile calls the reconciler; a panic counts as a failed reconcile
// (retried with backoff), as in controller-runtime.
func (e *Engine) reconcile(ctx context.Context, key reconcile.Request) (res reconcile.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
			e.log.Error(err, "reconciler panicked", "key", key.String(), "stack", string(debug.Stack()))
		}
	}()
	return e.op.Reconciler.Reconcile(ctx, key)
}

// settleDurably records what the decision asks for in the Durable store
// before the request is answered.
func (e *Engine) settleDurably(ctx context.Context, key reconcile.Request, d outcome.Decision) error {
	log := e.log.WithValues("key", key.String(), "outcome", d.Action.String())
	switch d.Action {
	case outcome.RequeueAfter:
		if err := e.opts.Durable.Requeue(ctx, key, d.After); err != nil {
			return &ReconcileError{Key: key, Err: fmt.Errorf("reconciled, but the requeue could not be recorded: %w", err), Unrecorded: true}
		}
		return nil
	case outcome.Done, outcome.Terminal:
		if err := e.opts.Durable.Succeeded(ctx, key); err != nil {
			log.Error(err, "cancelling a pending retry") // it will fire once, harmlessly
		}
		if d.Action == outcome.Terminal {
			e.stats.Failures.Add(1)
			return &ReconcileError{Key: key, Err: d.Err, Terminal: true}
		}
		return nil
	}
	e.stats.Failures.Add(1)
	if d.Err == nil {
		d.Err = errors.New("Requeue requested")
	}
	delay, attempt, err := e.opts.Durable.Failed(ctx, key)
	if err != nil {
		return &ReconcileError{Key: key, Err: fmt.Errorf("%v; and the retry could not be recorded: %w", d.Err, err), Unrecorded: true}
	}
	log.Info("reconcile failed; retry recorded", "error", d.Err.Error(), "attempt", attempt, "retryIn", delay)
	return &ReconcileError{Key: key, Err: d.Err, RetryIn: delay, Recorded: true}
}
