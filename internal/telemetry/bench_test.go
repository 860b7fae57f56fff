package telemetry_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"

	"github.com/opzero/opzero/internal/telemetry"
)

// answer is an API server that answers at once, in memory.
type answer struct{}

func (answer) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// BenchmarkDelivery is one delivery with one reconcile making three API
// calls through the transport (to an in-memory API server), with export
// off and on (to a server that discards): the per-event cost of telemetry
// on the engine's side.
func BenchmarkDelivery(b *testing.B) {
	var conns atomic.Int64
	sink := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	sink.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	sink.Start()
	defer sink.Close()
	defer func() { b.Logf("%d connections", conns.Load()) }()
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
		}
		b.Run(name, func(b *testing.B) {
			p, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			if on {
				p = telemetry.Tracing()
			}
			hc := &http.Client{Transport: p.WrapTransport(answer{})}
			o := telemetry.NewObserver("bench-"+name, 8, logr.Discard())
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/", nil)
				_, d := o.Intake(req)
				d.Event("id", "type", "source", "update ConfigMap")
				d.Routed([]string{"ns/a"}, "why")
				ctx, run := o.Reconcile(context.Background(), "ns/a", []telemetry.Arrival{d.Queued()})
				for range 3 {
					r, _ := http.NewRequestWithContext(ctx, http.MethodGet, sink.URL+"/api/v1/namespaces/ns/configmaps/a", nil)
					resp, err := hc.Do(r)
					if err != nil {
						b.Fatal(err)
					}
					resp.Body.Close()
				}
				run.End(telemetry.Result{Label: "success"})
				d.Writer(httptest.NewRecorder()).WriteHeader(200)
				d.End()
			}
		})
	}
}
