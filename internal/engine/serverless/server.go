package serverless

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ServeOptions configures Serve.
type ServeOptions struct {
	// Addr to listen on; empty means ":$PORT", as Knative sets it, or ":8080".
	Addr string
	// ShutdownTimeout bounds the drain after ctx ends (25 s, under Knative's
	// default termination grace period).
	ShutdownTimeout time.Duration
	// Ready, if set, is called with the bound address once listening.
	Ready func(addr net.Addr)
	// Wrap, if set, wraps the event handler (authentication); /healthz
	// stays open for probes.
	Wrap func(http.Handler) http.Handler
	// CertFile and KeyFile serve TLS when both are set.
	CertFile, KeyFile string
}

// Addr returns the listen address from $PORT (Knative), default 8080.
func Addr() string {
	if p := os.Getenv("PORT"); p != "" {
		return ":" + p
	}
	return ":8080"
}

// Serve listens and serves e until ctx ends (SIGTERM on Knative
// scale-down), then stops accepting, lets in-flight requests and their
// reconciles finish within ShutdownTimeout, and returns nil.
func (e *Engine) Serve(ctx context.Context, o ServeOptions) error {
	return serve(ctx, e, o, e.opts.MaxWait, []*Engine{e})
}

// serve listens and serves h until ctx ends, then stops accepting, lets
// in-flight requests and the reconciles of engines finish within
// o.ShutdownTimeout, and returns nil.
func serve(ctx context.Context, h http.Handler, o ServeOptions, maxWait time.Duration, engines []*Engine) error {
	if o.Addr == "" {
		o.Addr = Addr()
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 25 * time.Second
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (set $PORT to another port)", o.Addr, err)
	}
	srv := newServer(h, o, maxWait)
	if o.Ready != nil {
		o.Ready(l.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- serveOn(srv, l, o) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return shutdown(srv, o.ShutdownTimeout, engines)
}

// newServer is the HTTP server of h: events on /, wrapped by o.Wrap, and
// /healthz open for probes.
func newServer(h http.Handler, o ServeOptions, maxWait time.Duration) *http.Server {
	mux := http.NewServeMux()
	if o.Wrap != nil {
		h = o.Wrap(h)
	}
	mux.Handle("/", h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      maxWait + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

func serveOn(srv *http.Server, l net.Listener, o ServeOptions) error {
	if o.CertFile != "" && o.KeyFile != "" {
		return srv.ServeTLS(l, o.CertFile, o.KeyFile)
	}
	return srv.Serve(l)
}

func shutdown(srv *http.Server, timeout time.Duration, engines []*Engine) error {
	names := make([]string, len(engines))
	for i, e := range engines {
		e.draining.Store(true)
		names[i] = e.op.Name
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	engines[0].log.Info("shutting down: no new events, finishing in-flight reconciles", "timeout", timeout, "controllers", strings.Join(names, ", "))
	errs := []error{srv.Shutdown(ctx)} // waits for handlers, which wait for their reconciles
	for _, e := range engines {
		errs = append(errs, e.finish(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutdown not finished within %s: %w", timeout, err)
	}
	return nil
}

// finish ends what the engine runs once no request is served any more:
// the kept Leases' releases, the admitted reconciles, the timers.
func (e *Engine) finish(ctx context.Context) error {
	var errQ error
	if e.opts.Locker != nil {
		for key, seq := range e.keeper.close() { // the kept Leases: released by their key's run
			e.queue.Submit(key, &arrival{release: true, seq: seq})
		}
	}
	if e.opts.AnswerAdmitted || e.opts.Locker != nil {
		errQ = e.queue.Drain(ctx) // the admitted events' reconciles and the releases: nobody waits for them
	} else {
		errQ = e.queue.Shutdown(ctx)
	}
	if e.sole != nil {
		e.sole.close() // after the releases: they may need it no more
	}
	e.retry.stop()
	e.checks.Stop()
	e.readmit.Stop()
	return errQ
}
