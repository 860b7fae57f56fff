package serverless

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/standin"
)

// settle interprets what a reconcile returned, as controller-runtime's
// controller does, arranges what follows and returns the verdict:
//
//   - an error wrapping reconcile.TerminalError: no retry (Terminal);
//   - any other error: a retry after the key's backoff (the Result is
//     ignored): Retrying, or RetryRecorded with durable time;
//   - otherwise a success: status.observedGeneration is written (with
//     WithAutoObservedGeneration; if that fails, the reconcile counts as
//     failed), then Result.RequeueAfter schedules a reconcile after that
//     long, Result.Requeue one after the key's backoff (rate limited, as
//     controller-runtime's workqueue does), and neither cancels a pending
//     retry. If a requeue cannot be recorded: Unavailable.
//
// It is the only place that does, with durable time or without: e.retry
// is the one difference.
func (e *Engine) settle(ctx context.Context, key reconcile.Request, st *standin.State, res reconcile.Result, err error) *Verdict {
	logger := log.FromContext(ctx)
	if err == nil && e.op.AutoObservedGeneration {
		if werr := standin.WriteObservedGeneration(ctx, e.c, e.op.Primary.GVK, key.NamespacedName, st.Generation()); werr != nil {
			err = fmt.Errorf("reconciled, but writing status.observedGeneration failed: %w", werr)
		}
	}
	switch {
	case err != nil && errors.Is(err, reconcile.TerminalError(nil)):
		e.stats.Failures.Add(1)
		e.forget(ctx, key)
		logger.Error(err, "reconcile failed terminally; not retried")
		return &Verdict{Key: key, Outcome: Terminal, Err: err}
	case err != nil:
		e.stats.Failures.Add(1)
		next, rerr := e.retry.backoff(ctx, key)
		if rerr != nil {
			return unavailableVerdict(key, fmt.Errorf("%v; and the retry could not be recorded: %w", err, rerr))
		}
		logger.Info("reconcile failed; retry scheduled", "error", err.Error(), "retryIn", next)
		if e.opts.Durable != nil {
			return &Verdict{Key: key, Outcome: RetryRecorded, Err: err, Next: next}
		}
		return &Verdict{Key: key, Outcome: Retrying, Err: err, Next: next}
	case res.RequeueAfter > 0:
		if rerr := e.retry.requeue(ctx, key, res.RequeueAfter); rerr != nil {
			return unavailableVerdict(key, fmt.Errorf("reconciled, but the requeue could not be recorded: %w", rerr))
		}
		return &Verdict{Key: key, Outcome: Reconciled, Next: res.RequeueAfter, Note: fmt.Sprintf("requeued in %s", res.RequeueAfter)}
	case res.Requeue: //nolint:staticcheck // honoured for reconcilers written against it
		next, rerr := e.retry.backoff(ctx, key)
		if rerr != nil {
			return unavailableVerdict(key, fmt.Errorf("reconciled, but the requeue could not be recorded: %w", rerr))
		}
		return &Verdict{Key: key, Outcome: Reconciled, Next: next, Note: fmt.Sprintf("requeued (rate limited) in %s", next)}
	}
	e.forget(ctx, key)
	return &Verdict{Key: key, Outcome: Reconciled}
}

// forget cancels key's pending retry and resets its backoff; a failure
// costs at most one needless reconcile when the retry fires.
func (e *Engine) forget(ctx context.Context, key reconcile.Request) {
	if err := e.retry.succeeded(ctx, key); err != nil {
		log.FromContext(ctx).Error(err, "cancelling a pending retry; it fires once, harmlessly")
	}
}
