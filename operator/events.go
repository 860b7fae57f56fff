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

// eventWriteTimeout bounds each Event write, as reconcileutil's recorder
// bounds its own.
const eventWriteTimeout = 5 * time.Second

// eventWrites makes the serverless recorders' Event writes asynchronous:
// a reconcile that records an Event goes on to its next call (its status
// write: on a cold start one API round trip sooner) while the Event is
// written, and every answer waits until each Event write under way when
// it is about to be written has ended (wrap), as the drain does (flush).
// So an Event recorded before the answer has been written, or its write
// has failed and been logged, exactly as with a synchronous write, before
// the sender learns the event was handled and before Knative may stop the
// instance. The wait has no bound of its own: each write has one
// (eventWriteTimeout), and writes begun after the wait started are not
// waited for, so a busy instance never keeps an answer back for long.
type eventWrites struct {
	log logr.Logger

	mu      sync.Mutex
	writing map[chan struct{}]struct{} // one per write under way, closed when it ends
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
	done := make(chan struct{})
	a.w.mu.Lock()
	if a.w.writing == nil {
		a.w.writing = map[chan struct{}]struct{}{}
	}
	a.w.writing[done] = struct{}{}
	a.w.mu.Unlock()
	go func() {
		defer func() {
			a.w.mu.Lock()
			delete(a.w.writing, done)
			a.w.mu.Unlock()
			close(done)
		}()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventWriteTimeout)
		defer cancel()
		if err := a.Client.Create(ctx, obj, opts...); err != nil {
			a.w.log.Error(err, "writing a Kubernetes Event", "event", obj.GetName())
		}
	}()
	return nil
}

// flush waits until every Event write under way when it is called has
// ended.
func (w *eventWrites) flush() {
	w.mu.Lock()
	waiting := make([]chan struct{}, 0, len(w.writing))
	for done := range w.writing {
		waiting = append(waiting, done)
	}
	w.mu.Unlock()
	for _, done := range waiting {
		<-done
	}
}

// wrap makes h's answers wait for the Event writes under way.
func (w *eventWrites) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		f := &flushingWriter{ResponseWriter: rw, w: w}
		h.ServeHTTP(f, r)
		if !f.flushed { // no header written: net/http answers 200 once h returns
			f.flushed = true
			w.flush()
		}
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
