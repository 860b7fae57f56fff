package telemetry

import (
	"context"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opzero/opzero/internal/telemetry/otlpexport"
)

// Options names the process for its telemetry (otlpexport.Options).
type Options = otlpexport.Options

// Provider is the OpenTelemetry SDK set up by Setup, or nothing (export
// off): a nil *Provider is off.
type Provider struct {
	exp     *otlpexport.Provider
	tracing bool // Tracing(): spans are exported by a Setup still to come
}

// Enabled reports whether the environment asks for OTLP export
// (otlpexport.Enabled).
func Enabled() bool { return otlpexport.Enabled() }

// Setup is otlpexport.Setup with metrics read from controller-runtime's
// registry (crmetrics.Registry) unless o.Gatherer names another; nil when
// export is off.
func Setup(ctx context.Context, o Options) (*Provider, error) {
	if o.Gatherer == nil {
		o.Gatherer = crmetrics.Registry
	}
	exp, err := otlpexport.Setup(ctx, o)
	if err != nil || exp == nil {
		return nil, err
	}
	return &Provider{exp: exp}, nil
}

// Traces reports whether spans are exported.
func (p *Provider) Traces() bool { return p != nil && (p.tracing || p.exp.Traces()) }

// Shutdown pushes what is left and stops the exporters
// (otlpexport.Provider.Shutdown).
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.exp.Shutdown(ctx)
}
