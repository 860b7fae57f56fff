package classic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent/receive"
	"github.com/opzero/opzero/internal/eventroute"
)

// DefaultEventsAddr is where a classic operator that declares
// WatchesEvents takes its Broker's events when EventsOptions.Addr is "".
const DefaultEventsAddr = ":8082"

// EventsOptions configures the HTTP endpoint for external events.
type EventsOptions struct {
	// Addr to listen on (DefaultEventsAddr; "0" serves none).
	Addr string
	// Wrap, if set, wraps the handler (authentication).
	Wrap func(http.Handler) http.Handler
	// Ready, if set, is called with the bound address once listening.
	Ready func(net.Addr)
}

// maxEventBytes bounds one event (the serverless engine's default).
const maxEventBytes = 1 << 20

// events is the endpoint: it routes each CloudEvent with the same code as
// the serverless engine (package eventroute) and adds the keys to the
// controller's workqueue, which it gets when the controller starts.
type events struct {
	op *builder.Controller
	c  client.Reader
	mu sync.Mutex
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (s *events) setQueue(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = q
	return nil
}

func (s *events) queue() workqueue.TypedRateLimitingInterface[reconcile.Request] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q
}

// ServeHTTP answers 200 once the event's keys are queued (the reason in
// the Opzero-Result header), 400 for a malformed or unroutable event, 503
// while the controller has not started (another replica leads) or a map
// function failed: the Broker retries those.
func (s *events) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a CloudEvent here", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxEventBytes)
	ev, err := receive.Read(r)
	if err != nil {
		http.Error(w, "bad event: "+err.Error(), http.StatusBadRequest)
		return
	}
	q := s.queue()
	if q == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the controller has not started (not the leader yet); retry", http.StatusServiceUnavailable)
		return
	}
	routed, err := eventroute.Route(r.Context(), s.op, s.c, *ev)
	var t eventroute.Transient
	switch {
	case errors.As(err, &t):
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, "bad event: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, k := range routed.Keys {
		q.Add(k)
	}
	why := routed.Why(*ev)
	if len(routed.Keys) > 0 {
		keys := make([]string, len(routed.Keys))
		for i, k := range routed.Keys {
			keys[i] = k.String()
		}
		why = fmt.Sprintf("queued %d key(s) (%s): %s", len(keys), strings.Join(keys, ", "), why)
	}
	w.Header().Set(eventroute.ResultHeader, why)
	w.WriteHeader(http.StatusOK)
}

// serve is a manager runnable: it listens on o.Addr until ctx ends. It
// runs on every replica (not only the leader), answering 503 until this
// replica's controller starts.
type serve struct {
	h http.Handler
	o EventsOptions
}

func (s serve) NeedLeaderElection() bool { return false }

func (s serve) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", s.o.Addr)
	if err != nil {
		return fmt.Errorf("listening for Broker events on %s: %w (set --events-addr)", s.o.Addr, err)
	}
	h := s.h
	if s.o.Wrap != nil {
		h = s.o.Wrap(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}
	if s.o.Ready != nil {
		s.o.Ready(l.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log.FromContext(ctx).Info("stopping the Broker events endpoint", "addr", l.Addr().String())
	return srv.Shutdown(sctx)
}
