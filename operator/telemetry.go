package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opzero/opzero/internal/telemetry"
)

// withTelemetry wraps the API client's transport: writes are counted
// (Leases, Wakeups) and, when traces are exported (OTEL_* env), each API
// call is a span in the trace of its context.
func withTelemetry(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	var p *telemetry.Provider
	if telemetry.Enabled() && os.Getenv("OTEL_TRACES_EXPORTER") != "none" {
		p = telemetry.Tracing()
	}
	c.Wrap(p.WrapTransport)
	return c
}

// startTelemetry starts what the environment asks for: OTLP export of
// traces and metrics (OTEL_EXPORTER_OTLP_ENDPOINT etc.; off when unset)
// and, in serverless mode, /metrics on MetricsAddr. stop pushes what is
// left and must be called once the engine has drained.
func (r *Runtime) startTelemetry(ctx context.Context) (stop func(), err error) {
	name := r.ops[0].Name
	p, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: name, InstanceID: instanceID(r.opts.InstanceID)})
	if err != nil {
		return nil, err
	}
	var srv *http.Server
	if r.mgr == nil && r.opts.MetricsAddr != "" && r.opts.MetricsAddr != "0" {
		l, err := net.Listen("tcp", r.opts.MetricsAddr)
		if err != nil {
			_ = p.Shutdown(ctx)
			return nil, fmt.Errorf("--metrics-addr %s: %w (choose another address, or 0 to turn /metrics off)", r.opts.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(crmetrics.Registry, promhttp.HandlerOpts{}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		r.opts.Logger.Info("serving metrics", "addr", l.Addr().String(), "path", "/metrics")
	}
	if p != nil {
		r.opts.Logger.Info("exporting telemetry with OTLP", "endpoint", firstOf(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"),
			os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")), "service", name)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
			r.opts.Logger.Error(err, "the last telemetry push on drain failed; check the collector at OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		if srv != nil {
			_ = srv.Close()
		}
	}, nil
}

// instanceID is service.instance.id: --instance-id, $POD_NAME, else host-pid.
func instanceID(flag string) string {
	if id := firstOf(flag, os.Getenv("POD_NAME")); id != "" {
		return id
	}
	h, _ := os.Hostname()
	return h + "-" + strconv.Itoa(os.Getpid())
}
