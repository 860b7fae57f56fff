package serverless

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/recstate"
	"github.com/opzero/opzero/outcome"
)

// ReconcileError is what a waiting request learns of a failed reconcile.
type ReconcileError struct {
	Key      reconcile.Request
	Err      error
	Terminal bool
	// RetryIn is when the in-process retry fires (not Terminal).
	RetryIn time.Duration
}

func (e *ReconcileError) Error() string {
	if e.Terminal {
		return fmt.Sprintf("%s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v (retry in %s)", e.Key, e.Err, e.RetryIn)
}

func (e *ReconcileError) Unwrap() error { return e.Err }

var errTimeout = errors.New("reconcile timed out")

// run is the queue's RunFunc: one reconcile of key, never concurrent with
// another of the same key. arrivals are the events folded into this run.
func (e *Engine) run(ctx context.Context, key reconcile.Request, arrivals []*arrival) error {
	var standin []byte
	for _, a := range arrivals {
		if a != nil && a.object != nil {
			standin = a.object // the newest wins
		}
	}
	st := recstate.New(e.op.Primary.GVK, key.NamespacedName, standin)
	ctx, cancel := context.WithTimeoutCause(recstate.With(ctx, st), e.opts.ReconcileTimeout, errTimeout)
	defer cancel()
	e.stats.Reconciles.Add(1)
	res, err := e.reconcile(ctx, key)
	d := outcome.Decide(res, err)
	log := e.log.WithValues("key", key.String(), "outcome", d.Action.String())
	switch d.Action {
	case outcome.Done, outcome.RequeueAfter:
		e.retries.Success(key) // a success cancels a pending retry
		if d.Action == outcome.RequeueAfter {
			e.retries.After(key, d.After)
		}
		if e.op.AutoObservedGeneration {
			if err := recstate.SetObservedGeneration(ctx, e.c, e.op.Primary.GVK, key.NamespacedName, st.Generation()); err != nil {
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
