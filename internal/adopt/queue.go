package adopt

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// captureQueue stands in for a controller's workqueue. During a Deliver it
// collects what the handlers add; outside one (a custom source, a user's
// goroutine) it passes requests to fallback. Get blocks until shutdown, so
// the controller's own workers never take an item.
type captureQueue struct {
	fallback func(reconcile.Request, time.Duration)

	mu      sync.Mutex
	collect *[]reconcile.Request // non-nil during a Deliver
	// getting is closed at the first Get: the controller has started its
	// sources and launched its workers.
	getting  chan struct{}
	gotOnce  sync.Once
	shutdown chan struct{}
	shutOnce sync.Once
}

var _ workqueue.TypedRateLimitingInterface[reconcile.Request] = (*captureQueue)(nil)

func newCaptureQueue(fallback func(reconcile.Request, time.Duration)) *captureQueue {
	return &captureQueue{fallback: fallback, getting: make(chan struct{}), shutdown: make(chan struct{})}
}

func (q *captureQueue) Add(item reconcile.Request) { q.AddAfter(item, 0) }

func (q *captureQueue) AddAfter(item reconcile.Request, d time.Duration) {
	q.mu.Lock()
	if q.collect != nil {
		*q.collect = append(*q.collect, item)
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	if q.fallback != nil {
		q.fallback(item, d)
	}
}

func (q *captureQueue) AddRateLimited(item reconcile.Request) { q.Add(item) }

func (q *captureQueue) Len() int { return 0 }

// Get blocks until the queue shuts down: reconciles run in opzero's engine.
func (q *captureQueue) Get() (reconcile.Request, bool) {
	q.gotOnce.Do(func() { close(q.getting) })
	<-q.shutdown
	return reconcile.Request{}, true
}

func (q *captureQueue) Done(reconcile.Request)            {}
func (q *captureQueue) Forget(reconcile.Request)          {}
func (q *captureQueue) NumRequeues(reconcile.Request) int { return 0 }
func (q *captureQueue) ShutDown()                         { q.shutOnce.Do(func() { close(q.shutdown) }) }
func (q *captureQueue) ShutDownWithDrain()                { q.ShutDown() }

func (q *captureQueue) ShuttingDown() bool {
	select {
	case <-q.shutdown:
		return true
	default:
		return false
	}
}

// during runs f with adds collected, and returns them without duplicates.
// The caller serializes calls (Controller.deliverMu).
func (q *captureQueue) during(f func()) []reconcile.Request {
	var got []reconcile.Request
	q.mu.Lock()
	q.collect = &got
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.collect = nil
		q.mu.Unlock()
	}()
	f()
	seen := map[reconcile.Request]bool{}
	out := got[:0]
	for _, r := range got {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}
