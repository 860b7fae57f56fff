package telemetry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/opzero/opzero/internal/devenv/otelcol"
	"github.com/opzero/opzero/internal/devenv/pinned"
	"github.com/opzero/opzero/internal/telemetry"
)

// collector starts the real OTLP receiver (package pinned's) for t and
// points this process's OTEL_* environment at it.
func collector(t *testing.T) *otelcol.Collector {
	t.Helper()
	bin, err := pinned.Resolver{}.FindOne(context.Background(), pinned.OTLPReceiver)
	if err != nil {
		t.Fatal(err)
	}
	c, err := otelcol.Start(context.Background(), bin, t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	for _, kv := range c.Env(time.Hour) { // metrics only at Shutdown: what arrives was pushed on drain
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
	return c
}

// TestDeliveryTraceAndMetricsReachACollector: a delivery that carries a
// W3C traceparent, its reconcile and an API call the reconcile makes are
// one trace in the collector (intake -> queue wait, reconcile -> the API
// call), the reconcile is counted by result, and the log line and the
// reconciler's logger carry the trace ID; all of it pushed by Shutdown.
func TestDeliveryTraceAndMetricsReachACollector(t *testing.T) {
	c := collector(t)
	ctx := context.Background()
	p, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "tracetest", InstanceID: "tracetest-1"})
	if err != nil || p == nil {
		t.Fatalf("Setup: %v, %v; want a provider (OTEL_EXPORTER_OTLP_ENDPOINT is set)", p, err)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer api.Close()
	hc := &http.Client{Transport: p.WrapTransport(http.DefaultTransport)}

	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	o := telemetry.NewObserver("tracetest", 2, log)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("ce-traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	rctx, d := o.Intake(req)
	_ = rctx
	d.Event("ev-1", "dev.knative.apiserver.resource.update", "ConfigMap ns/cm", "update ConfigMap")
	d.Routed([]string{"ns/cm"}, "ConfigMap update ns/cm")
	a := d.Queued()
	runCtx, run := o.Reconcile(ctx, "ns/cm", []telemetry.Arrival{a})
	var logged logr.Logger = log.WithValues(run.LogValues()...)
	logged.Info("reconciling")
	areq, _ := http.NewRequestWithContext(runCtx, http.MethodGet, api.URL+"/api/v1/namespaces/ns/configmaps/cm", nil)
	resp, err := hc.Do(areq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// A call outside any delivery (discovery, a TokenReview) starts no trace.
	if resp, err = hc.Get(api.URL + "/api/v1/namespaces/ns/secrets/s"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	run.End(telemetry.Result{Label: "success"})
	rec := httptest.NewRecorder()
	d.Writer(rec).WriteHeader(http.StatusOK)
	d.End()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	if rec.Header().Get(telemetry.TraceHeader) != traceID || rec.Header().Get(telemetry.ReconcilesHeader) != "1" ||
		rec.Header().Get(telemetry.WakeReasonHeader) != "update ConfigMap" {
		t.Errorf("answer headers %v, want the trace ID, 1 reconcile and the wake reason", rec.Header())
	}
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, `"traceID"="`+traceID+`"`) || !strings.Contains(joined, `"eventID"="ev-1"`) ||
		!strings.Contains(joined, `"reconciles"=1`) || !strings.Contains(joined, `"code"=200`) {
		t.Errorf("log lines lack the correlation IDs or the delivery's fields:\n%s", joined)
	}

	data, err := otelcol.Read(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]otelcol.Span{}
	for _, s := range data.Trace(traceID) {
		byName[s.Name] = s
	}
	intake, wait, recon, call := byName["intake update ConfigMap"], byName["queue wait"], byName["reconcile"], byName["get configmaps"]
	switch {
	case intake.SpanID == "" || recon.SpanID == "" || call.SpanID == "" || wait.SpanID == "":
		t.Fatalf("spans of trace %s: %v; want intake, queue wait, reconcile and the API call", traceID, byName)
	case intake.ParentSpanID != "00f067aa0ba902b7":
		t.Errorf("intake's parent %q, want the traceparent's span", intake.ParentSpanID)
	case recon.ParentSpanID != intake.SpanID || wait.ParentSpanID != intake.SpanID:
		t.Errorf("reconcile's parent %q, queue wait's %q; want intake %q", recon.ParentSpanID, wait.ParentSpanID, intake.SpanID)
	case call.ParentSpanID != recon.SpanID:
		t.Errorf("API call's parent %q, want reconcile %q", call.ParentSpanID, recon.SpanID)
	}
	for _, s := range data.Spans {
		if s.Name == "get secrets" {
			t.Errorf("a call made outside any trace was traced: %+v", s)
		}
	}
	if recon.Resource["service.name"] != "tracetest" || recon.Resource["service.instance.id"] != "tracetest-1" {
		t.Errorf("resource %v, want service.name and service.instance.id from Options", recon.Resource)
	}
	if n := data.Latest("controller_runtime_reconcile_total", map[string]string{"controller": "tracetest", "result": "success"}); n != 1 {
		t.Errorf("controller_runtime_reconcile_total{result=success} = %v in the collector, want 1", n)
	}
	if n := data.Latest("opzero_events_total", map[string]string{"controller": "tracetest", "reason": "update", "code": "200"}); n != 1 {
		t.Errorf("opzero_events_total{reason=update,code=200} = %v, want 1", n)
	}
	if n := data.Latest("opzero_cold_starts_total", map[string]string{"controller": "tracetest"}); n != 1 {
		t.Errorf("opzero_cold_starts_total = %v, want 1", n)
	}
}

// TestOffWithoutEndpoint: no OTEL_EXPORTER_OTLP_ENDPOINT, no SDK.
func TestOffWithoutEndpoint(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		t.Setenv(k, "")
	}
	p, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "off"})
	if p != nil || err != nil {
		t.Fatalf("Setup = %v, %v; want nil, nil", p, err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestGRPCProtocolRefused: a protocol opzero does not export says what to set.
func TestGRPCProtocolRefused(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, err := telemetry.Setup(context.Background(), telemetry.Options{})
	if err == nil || !strings.Contains(err.Error(), "http/protobuf") {
		t.Fatalf("Setup with grpc: %v, want an error naming http/protobuf", err)
	}
}

// TestDeliveryCountsFromArrival: a request stamped by Arrived before a
// handler that takes time of its own (the authentication) has its delivery
// line count from the arrival, with that time as authTime; an unstamped
// one has no authTime.
func TestDeliveryCountsFromArrival(t *testing.T) {
	for _, stamped := range []bool{true, false} {
		var line string
		o := telemetry.NewObserver("arrival", 1, funcr.NewJSON(func(obj string) { line = obj }, funcr.Options{}))
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, d := o.Intake(r)
			d.End()
		})
		auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(30 * time.Millisecond) // a TokenReview
			h.ServeHTTP(w, r)
		})
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if stamped {
			r = telemetry.Arrived(r)
		}
		auth.ServeHTTP(httptest.NewRecorder(), r)
		var fields struct {
			Duration string `json:"duration"`
			AuthTime string `json:"authTime"`
		}
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !stamped {
			if fields.AuthTime != "" {
				t.Errorf("unstamped: authTime %q in %s", fields.AuthTime, line)
			}
			continue
		}
		a, err1 := time.ParseDuration(fields.AuthTime)
		d, err2 := time.ParseDuration(fields.Duration)
		if err1 != nil || err2 != nil || a < 30*time.Millisecond || d < a {
			t.Errorf("stamped: authTime %q, duration %q; want authTime >= 30ms (the handler in front) and duration >= authTime: %s", fields.AuthTime, fields.Duration, line)
		}
	}
}
