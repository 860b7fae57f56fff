package classic

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"
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

// webhooks is the webhook server: it records what is registered, which
// Start then refuses.
type webhooks struct {
	webhook.Server
	mu   sync.Mutex
	regs []string
}

func (w *webhooks) Register(path string, _ http.Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.regs = append(w.regs, path)
}

func (w *webhooks) paths() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.regs...)
}

// converters counts registered converters, which Start refuses.
type converters struct {
	conversion.Registry
	n int
}

func (c *converters) RegisterConverter(gk schema.GroupKind, cv conversion.Converter) error {
	c.n++
	return c.Registry.RegisterConverter(gk, cv)
}
