// Package otlpexport sets up OpenTelemetry export over OTLP/HTTP from the
// standard OTEL_* environment: spans through the SDK, and a Prometheus
// registry pushed as OTLP metrics. It links no controller-runtime, so that
// a binary that needs only this (the wakeup source) stays small; package
// telemetry's Setup is the same with controller-runtime's registry.
package otlpexport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ProcessStart is when this package was initialized: close enough to exec
// for a cold start's time to first reconcile, and the start of the pushed
// cumulative metrics.
var ProcessStart = time.Now()

// ScopeName is the instrumentation scope of opzero's spans and metrics.
const ScopeName = "github.com/opzero/opzero/serverless"

// Options names the process for its telemetry.
type Options struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise (the operator's name).
	ServiceName string
	// InstanceID is service.instance.id (the pod name, else host-pid).
	InstanceID string
	// Gatherer is what the metrics push reads (nil: no metrics pushed;
	// package telemetry's Setup passes controller-runtime's registry).
	Gatherer prometheus.Gatherer
}

// Provider is the OpenTelemetry SDK, set up from the standard OTEL_*
// environment variables, or nothing (export off). A nil *Provider is off.
type Provider struct {
	tp *sdktrace.TracerProvider
	mp *metricPusher
}

// Enabled reports whether the environment asks for OTLP export: an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT, or the traces' or metrics'
// own) and OTEL_SDK_DISABLED is not true.
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// Setup starts the SDK if Enabled, else returns nil (and nothing is
// allocated): traces (batched) and metrics (the Prometheus registry, read
// every OTEL_METRIC_EXPORT_INTERVAL, 60 s by default) are exported with
// OTLP over HTTP (http/protobuf, the OTLP default; otlp.go) to
// OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces, /v1/metrics) or the signals'
// own endpoints, with OTEL_EXPORTER_OTLP_HEADERS and _TIMEOUT (also per
// signal). Trace sampling and batching follow OTEL_TRACES_SAMPLER and
// OTEL_BSP_* (the SDK reads them). OTEL_TRACES_EXPORTER or
// OTEL_METRICS_EXPORTER "none" turns that signal off. Call Shutdown on
// drain: it pushes what is left.
func Setup(ctx context.Context, o Options) (*Provider, error) {
	if !Enabled() {
		return nil, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"} {
		if v := os.Getenv(k); v != "" && v != "http/protobuf" {
			return nil, fmt.Errorf("%s=%s: opzero exports OTLP over HTTP only; set it to http/protobuf (or unset it) and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)", k, v)
		}
	}
	attrs := []attribute.KeyValue{}
	if o.ServiceName != "" {
		attrs = append(attrs, attribute.String("service.name", o.ServiceName))
	}
	if o.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.InstanceID))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry resource from OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME: %w", err)
	}
	p := &Provider{}
	if os.Getenv("OTEL_TRACES_EXPORTER") != "none" {
		pt, err := newPoster("traces")
		if err != nil {
			return nil, err
		}
		exp, err := otlptrace.New(ctx, traceClient{pt})
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		p.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		otel.SetTracerProvider(p.tp)
		otel.SetTextMapPropagator(propagation.TraceContext{})
	}
	if os.Getenv("OTEL_METRICS_EXPORTER") != "none" && o.Gatherer != nil {
		pm, err := newPoster("metrics")
		if err != nil {
			_ = p.Shutdown(ctx)
			return nil, err
		}
		p.mp = startPusher(pm, o.Gatherer, res)
	}
	return p, nil
}

// Traces reports whether spans are exported.
func (p *Provider) Traces() bool { return p != nil && p.tp != nil }

// Shutdown pushes what is left (spans in the batch, the metrics as they
// are now) and stops the exporters. Called on drain, before the process
// exits, so that an instance scaling to zero loses nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.tp != nil {
		errs = append(errs, p.tp.Shutdown(ctx))
	}
	if p.mp != nil {
		errs = append(errs, p.mp.shutdown(ctx)) // reads and pushes once more
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pushing the last telemetry: %w", err)
	}
	return nil
}
