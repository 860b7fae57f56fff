package serverless

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/standin"
)

// settle interprets what a reconcile returned, as controller-runtime's
// controller does, arranges what follows and returns the verdict:
//
//   - an error wrapping reconcile.TerminalError: no retry (Terminal);
//   - any other error: a retry after the key's backoff (the Result is
//     ignored): Retrying, or RetryRecorded with durable time; without
//     durable time, a failure because the API server is away (connection
//     refused or reset, timeouts, 429/503/504) is Unavailable, so that the
//     sender delivers again;
//   - otherwise a success: Result.RequeueAfter schedules a reconcile after
//     that long (replacing a pending retry), Result.Requeue one after the
//     key's backoff (rate limited, as controller-runtime's workqueue does;
//     an earlier pending one wins), then status.observedGeneration is
//     written (with WithAutoObservedGeneration; if that fails, the
//     reconcile counts as failed), and a plain success cancels a pending
//     retry. All are Reconciled; if a requeue cannot be recorded:
//     Unavailable, with the generation left unobserved, so the sweep
//     reconciles the object again (written first, it would look handled
//     and the requeue would be lost).
//
// It is the only place that does, with durable time or without: e.retry
// is the one difference.
func (e *Engine) settle(ctx context.Context, key reconcile.Request, st *standin.State, res reconcile.Result, err error) *Verdict {
	logger := log.FromContext(ctx)
	gone := err == nil && st != nil && st.Gone()
	if err != nil && apierrors.IsNotFound(err) && !errors.Is(err, reconcile.TerminalError(nil)) && e.primaryGone(ctx, key) {
		// A write of the object (its status, a finalizer) that found it
		// deleted meanwhile: nothing is left to retry.
		logger.Info("the object was deleted during its reconcile; its not-found is settled, not retried", "error", err.Error())
		err, gone = nil, true
	}
	var requeued *Verdict // a success's requeue, recorded before observedGeneration
	if err == nil && res.RequeueAfter > 0 {
		if rerr := e.retry.requeue(ctx, key, res.RequeueAfter); rerr != nil {
			return unavailableVerdict(key, fmt.Errorf("reconciled, but the requeue could not be recorded: %w", rerr))
		}
		requeued = &Verdict{Key: key, Outcome: Reconciled, Next: res.RequeueAfter, Note: fmt.Sprintf("requeued in %s", res.RequeueAfter)}
	} else if err == nil && res.Requeue { //nolint:staticcheck // honoured for reconcilers written against it
		next, rerr := e.retry.backoff(ctx, key)
		if rerr != nil {
			return unavailableVerdict(key, fmt.Errorf("reconciled, but the requeue could not be recorded: %w", rerr))
		}
		requeued = &Verdict{Key: key, Outcome: Reconciled, Next: next, Note: fmt.Sprintf("requeued (rate limited) in %s", next)}
	}
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
		if apiServerAway(err) {
			// The sender must deliver again (503): the in-process retry
			// dies with this instance, and ApiServerSource drops a 500.
			return &Verdict{Key: key, Outcome: Unavailable, Err: fmt.Errorf("the API server cannot be reached or is overloaded (retry scheduled here too): %w", err), Next: next}
		}
		return &Verdict{Key: key, Outcome: Retrying, Err: err, Next: next}
	case requeued != nil:
		return requeued
	case gone:
		// The object is gone: its pending wakeups (a RequeueAfter asked
		// for before the delete) go with it, rather than waking the
		// operator for nothing.
		if err := e.retry.gone(ctx, key); err != nil {
			logger.Error(err, "deleting the wakeups of a deleted object; they fire once, harmlessly")
		}
		return &Verdict{Key: key, Outcome: Reconciled, Note: "the object is gone"}
	}
	e.forget(ctx, key)
	return &Verdict{Key: key, Outcome: Reconciled}
}

// primaryGone reports whether key's object does not exist (a GET of its
// metadata says not found).
func (e *Engine) primaryGone(ctx context.Context, key reconcile.Request) bool {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(e.op.Primary.GVK)
	return apierrors.IsNotFound(e.c.Get(ctx, key.NamespacedName, m))
}

// forget cancels key's pending retry and resets its backoff; a failure
// costs at most one needless reconcile when the retry fires.
func (e *Engine) forget(ctx context.Context, key reconcile.Request) {
	if err := e.retry.succeeded(ctx, key); err != nil {
		log.FromContext(ctx).Error(err, "cancelling a pending retry; it fires once, harmlessly")
	}
}

// Verdict is what became of one key's reconcile: settle (or, before the
// reconcile, the key's Lease) returns it, and it alone chooses the HTTP
// answer. A run's error, as its ticket reports it, is always its *Verdict.
type Verdict struct {
	Key     reconcile.Request
	Outcome Outcome
	// Err is the reconcile's error (Retrying, RetryRecorded, Terminal), or
	// why what must follow could not be arranged (Unavailable).
	Err error
	// Next is how long until the key's next reconcile, if one is scheduled.
	Next time.Duration
	// Note says more: a requeue, the instance a key was handed off to.
	Note string
}

// Outcome classifies a Verdict, from best to worst: a request about
// several keys is answered for the worst.
type Outcome int

const (
	// Reconciled: the reconcile succeeded (a requeue it asked for is
	// scheduled: Next). 200.
	Reconciled Outcome = iota
	// HandedOff: another live instance holds the key's Lease; it was marked
	// and reconciles the key again before letting go. 200.
	HandedOff
	// RetryRecorded: the reconcile failed and its retry is a durable
	// Wakeup. 200: the event is handled.
	RetryRecorded
	// Terminal: the reconcile returned a reconcile.TerminalError: retrying
	// cannot help. 422, which no sender retries.
	Terminal
	// Retrying: the reconcile failed; its retry is an in-process timer.
	// 500 (ApiServerSource does not retry it; a Broker does).
	Retrying
	// Unavailable: the key was not reconciled, or what must follow could
	// not be recorded: the sender must deliver again. 503.
	Unavailable
)

// Code is the HTTP status an Outcome is answered with.
func (o Outcome) Code() int {
	switch o {
	case Terminal:
		return http.StatusUnprocessableEntity
	case Retrying:
		return http.StatusInternalServerError
	case Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusOK
}

func (v *Verdict) Error() string {
	switch {
	case v.Outcome == HandedOff:
		return fmt.Sprintf("%s: %s", v.Key, v.Note)
	case v.Err == nil && v.Note != "":
		return fmt.Sprintf("%s: %s", v.Key, v.Note)
	case v.Err == nil:
		return v.Key.String() + ": reconciled"
	case v.Outcome == Retrying || v.Outcome == RetryRecorded:
		return fmt.Sprintf("%s: %v (retry in %s)", v.Key, v.Err, v.Next)
	}
	return fmt.Sprintf("%s: %v", v.Key, v.Err)
}

func (v *Verdict) Unwrap() error { return v.Err }

func unavailableVerdict(key reconcile.Request, err error) *Verdict {
	return &Verdict{Key: key, Outcome: Unavailable, Err: err}
}

// retrier schedules what follows a settled reconcile of a key: in memory
// (timers that die with this instance) or durably (Wakeup records that the
// wakeup source delivers back, surviving scale to zero). settle calls it
// the same way for both.
type retrier interface {
	// succeeded forgets key's failures and cancels its pending retry.
	succeeded(ctx context.Context, key reconcile.Request) error
	// requeue schedules a reconcile of key after d (a RequeueAfter: also a
	// success), unless one is due sooner.
	requeue(ctx context.Context, key reconcile.Request, d time.Duration) error
	// backoff counts a failure of key (or a Requeue: true, which is rate
	// limited like one) and schedules a reconcile after the key's backoff;
	// it returns how long until it is due.
	backoff(ctx context.Context, key reconcile.Request) (time.Duration, error)
	// gone drops all that is pending for key, whose object no longer
	// exists.
	gone(ctx context.Context, key reconcile.Request) error
	// stop cancels what is pending in memory (shutdown).
	stop()
}

var (
	_ retrier = memoryRetry{}
	_ retrier = durableRetry{}
)

// memoryRetry is in-process time: a timer per key.
type memoryRetry struct {
	t *backoff.Tracker[reconcile.Request]
}

func (m memoryRetry) succeeded(_ context.Context, key reconcile.Request) error {
	m.t.Success(key)
	return nil
}

func (m memoryRetry) requeue(_ context.Context, key reconcile.Request, d time.Duration) error {
	m.t.Success(key) // a success cancels a pending retry
	m.t.After(key, d)
	return nil
}

func (m memoryRetry) backoff(_ context.Context, key reconcile.Request) (time.Duration, error) {
	d, _ := m.t.Failure(key)
	return d, nil
}

func (m memoryRetry) gone(_ context.Context, key reconcile.Request) error {
	m.t.Success(key)
	return nil
}

func (m memoryRetry) stop() { m.t.Stop() }

// durableRetry is durable time: a Wakeup record per key.
type durableRetry struct {
	d Durable
}

func (r durableRetry) succeeded(ctx context.Context, key reconcile.Request) error {
	return r.d.Succeeded(ctx, key)
}

func (r durableRetry) requeue(ctx context.Context, key reconcile.Request, d time.Duration) error {
	return r.d.Requeue(ctx, key, d) // replaces a pending retry, resets the backoff
}

func (r durableRetry) backoff(ctx context.Context, key reconcile.Request) (time.Duration, error) {
	d, _, err := r.d.Failed(ctx, key)
	return d, err
}

// goneAware is a Durable that deletes a key's record whatever it holds
// (wakeup.Store); others only cancel a pending retry.
type goneAware interface {
	Gone(ctx context.Context, key reconcile.Request) error
}

func (r durableRetry) gone(ctx context.Context, key reconcile.Request) error {
	if g, ok := r.d.(goneAware); ok {
		return g.Gone(ctx, key)
	}
	return r.d.Succeeded(ctx, key)
}

func (durableRetry) stop() {}
