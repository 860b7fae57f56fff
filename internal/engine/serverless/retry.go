package serverless

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/backoff"
)

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

func (durableRetry) stop() {}
