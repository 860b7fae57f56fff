package classic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/opzero/opzero/internal/description"
)

// The parts of the adopted manager that serve beside the engine (health
// checks, metrics) and those that record what Start then refuses.

// serveChecks serves the health and ready checks beside the events.
func (m *adopted) serveChecks(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.Handle("/healthz/", http.StripPrefix("/healthz", &healthz.Handler{Checks: m.healthz}))
	mux.Handle("/readyz", http.StripPrefix("/readyz", &healthz.Handler{Checks: m.readyz}))
	mux.Handle("/readyz/", http.StripPrefix("/readyz", &healthz.Handler{Checks: m.readyz}))
	return mux
}

// probeServer serves the health and ready checks on
// mo.HealthProbeBindAddress (nil when it is "" or "0"; ProbeAddressEnv
// wins over it), as
// controller-runtime's manager does: /healthz and /readyz with their
// /<name> forms. It listens at once, so a taken address fails Start.
func (m *adopted) probeServer() (manager.Runnable, error) {
	addr := m.mo.HealthProbeBindAddress
	if v, ok := os.LookupEnv(description.ProbeAddressEnv); ok {
		addr = v // the generated Knative Service's: its checks are on the serving port
	}
	if addr == "" || addr == "0" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving health probes on %s (ctrl.Options.HealthProbeBindAddress, kubebuilder's --health-probe-bind-address; 0 turns it off): %w", addr, err)
	}
	mux := http.NewServeMux()
	for _, c := range []struct {
		path   string
		checks map[string]healthz.Checker
	}{{"/healthz", m.healthz}, {"/readyz", m.readyz}} {
		h := http.StripPrefix(c.path, &healthz.Handler{Checks: c.checks})
		mux.Handle(c.path, h)
		mux.Handle(c.path+"/", h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return manager.RunnableFunc(func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}), nil
}

func (m *adopted) metricsServer() (metricsserver.Server, error) {
	o := m.mo.Metrics
	if o.BindAddress == "" || o.BindAddress == "0" {
		return nil, nil
	}
	s, err := metricsserver.NewServer(o, m.GetConfig(), m.http)
	if err != nil || s == nil {
		return s, err
	}
	for p, h := range m.extra {
		if err := s.AddExtraHandler(p, h); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// webhooks is the project's webhook server as the serverless manager
// gives it: Register records each handler, which Start serves on the
// serverless port behind authentication (serve) instead of on a TLS port
// of its own: the API server calls the opzero hub, which forwards each
// AdmissionReview there with its OIDC token, waking the operator. The
// project's server itself is never started.
type webhooks struct {
	webhook.Server
	mu       sync.Mutex
	regs     []string
	handlers map[string]http.Handler
}

func (w *webhooks) Register(path string, h http.Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.handlers == nil {
		w.handlers = map[string]http.Handler{}
	}
	if _, dup := w.handlers[path]; !dup {
		w.regs = append(w.regs, path)
	}
	w.handlers[path] = h
}

// StartedChecker passes: the webhooks are served by the serverless HTTP
// server, which answers whatever asks for the checks (a project that adds
// it as a ready check would otherwise never be ready).
func (w *webhooks) StartedChecker() healthz.Checker { return healthz.Ping }

func (w *webhooks) paths() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.regs...)
}

// serve routes the registered webhook paths to their handlers and every
// other request to next (the engine's events).
func (w *webhooks) serve(next http.Handler) http.Handler {
	w.mu.Lock()
	defer w.mu.Unlock()
	mux := http.NewServeMux()
	mux.Handle("/", next)
	for p, h := range w.handlers {
		mux.Handle(p, h)
	}
	return mux
}
