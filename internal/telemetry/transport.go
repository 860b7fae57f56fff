package telemetry

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Tracing returns a Provider that only says traces are exported, for
// WrapTransport before Setup has run (the spans go through otel's global
// TracerProvider, which Setup sets).
func Tracing() *Provider { return &Provider{tracing: true} }

// WrapTransport is for rest.Config.WrapTransport: it counts the writes to
// the API server (opzero_api_writes_total: Leases, Wakeups, the rest) and,
// when p exports traces, makes a client span per API call (otelhttp) named
// after the verb and resource ("create wakeups"), in the trace of the
// request's context (calls outside any trace are not traced). The span
// carries the stable HTTP attributes http.request.method and
// http.response.status_code whichever otelhttp the binary links (before
// v0.60 it writes only the older http.method and http.status_code unless
// OTEL_SEMCONV_STABILITY_OPT_IN says otherwise, and an adopted project may
// link one as old as v0.58).
func (p *Provider) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	rt = counting{next: rt, m: Default()}
	if p.Traces() {
		rt = otelhttp.NewTransport(stableHTTPAttributes{next: rt}, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			verb, res := apiCall(r)
			return verb + " " + res
		}), otelhttp.WithFilter(func(r *http.Request) bool {
			// Only calls made for a delivery or a reconcile: discovery and
			// the senders' TokenReviews would each start a trace of their own.
			return trace.SpanContextFromContext(r.Context()).IsValid()
		}))
	}
	return rt
}

// stableHTTPAttributes runs inside otelhttp's client span (the span of the
// request's context) and sets the stable semantic conventions' method and
// status code on it.
type stableHTTPAttributes struct{ next http.RoundTripper }

func (s stableHTTPAttributes) RoundTrip(r *http.Request) (*http.Response, error) {
	span := trace.SpanFromContext(r.Context())
	span.SetAttributes(attribute.String("http.request.method", r.Method))
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	return resp, err
}

type counting struct {
	next http.RoundTripper
	m    *Metrics
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return resp, err
	}
	verb, res := apiCall(r)
	kind := "other"
	switch res {
	case "leases":
		kind = "lease"
	case "wakeups":
		kind = "wakeup"
	}
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	c.m.APIWrites.WithLabelValues(kind, verb, code).Inc()
	return resp, err
}

// apiCall names an API request by its Kubernetes verb and resource (the
// path segment after the namespace, or after the group version), e.g.
// ("create", "wakeups"), ("get", "configmaps").
func apiCall(r *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/..., /apis/group/version/...
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(r.Method), r.URL.Path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	named := len(parts) >= 2
	if len(parts) > 0 {
		resource = parts[0]
		if len(parts) >= 3 {
			resource += "/" + parts[2] // a subresource: status
		}
	}
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	case http.MethodGet:
		verb = "get"
		if !named {
			verb = "list"
			if r.URL.Query().Get("watch") == "true" {
				verb = "watch"
			}
		}
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb, resource
}
