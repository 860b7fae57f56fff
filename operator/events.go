package operator

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventFlushTimeout bounds how long an answer or the shutdown waits for
// the Event writes under way (reconcileutil's own timeout per Event).
const eventFlushTimeout = 5 * time.Second

// eventWrites makes the serverless recorders' Event writes asynchronous:
// a reconcile that records an Event goes on to its next call (its status
// write, on a cold start one API round trip sooner) while the Event is
// written, and every answer waits for the Event writes under way before
// it is written (wrap), as the drain does (flush): an Event recorded
// before the answer is written before the sender learns it was handled,
// and before Knative can stop the instance.
type eventWrites struct {
	log     logr.Logger
	pending sync.WaitGroup
}

// client returns c whose Creates of Events (both APIs) return at once and
// are written in the background; every other call is c's.
func (w *eventWrites) client(c client.Client) client.Client { return &asyncEvents{Client: c, w: w} }

type asyncEvents struct {
	client.Client
	w *eventWrites
}

func (a *asyncEvents) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	switch obj.(type) {
	case *eventsv1.Event, *corev1.Event:
	default:
		return a.Client.Create(ctx, obj, opts...)
	}
	a.w.pending.Add(1)
	go func() {
		defer a.w.pending.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventFlushTimeout)
		defer cancel()
		if err := a.Client.Create(ctx, obj, opts...); err != nil {
			a.w.log.Error(err, "writing a Kubernetes Event", "event", obj.GetName())
		}
	}()
	return nil
}

// flush waits until the Event writes under way are done, at most
// eventFlushTimeout.
func (w *eventWrites) flush() {
	done := make(chan struct{})
	go func() {
		w.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(eventFlushTimeout):
	}
}

// wrap makes h's answers wait for the Event writes under way.
func (w *eventWrites) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&flushingWriter{ResponseWriter: rw, w: w}, r)
	})
}

// flushingWriter flushes the Event writes before the answer's header.
type flushingWriter struct {
	http.ResponseWriter
	w       *eventWrites
	flushed bool
}

func (f *flushingWriter) WriteHeader(code int) {
	if !f.flushed {
		f.flushed = true
		f.w.flush()
	}
	f.ResponseWriter.WriteHeader(code)
}

func (f *flushingWriter) Write(b []byte) (int, error) {
	if !f.flushed {
		f.WriteHeader(http.StatusOK)
	}
	return f.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (f *flushingWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
