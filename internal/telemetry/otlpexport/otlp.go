package otlpexport

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// OTLP over HTTP (http/protobuf), posted here rather than with the
// otlptracehttp and otlpmetrichttp exporters: those link gRPC (through the
// collector service packages of go.opentelemetry.io/proto/otlp and their
// config), which costs a serverless operator ~19 MB of binary and ~6 MiB of
// RSS with export off (docs/benchmarks.md). The message types are the
// OpenTelemetry proto module's; spans are converted by the SDK's otlptrace
// exporter (this is its Client); metrics are read from the Prometheus
// registry and converted below.

// poster posts one signal's export requests to its OTLP/HTTP endpoint,
// configured by the OTEL_EXPORTER_OTLP_* variables as the specification
// says: the signal's own endpoint as is, else the base endpoint plus
// /v1/<signal>; headers; timeout (10 s).
type poster struct {
	url     string
	headers http.Header
	http    *http.Client
}

func newPoster(signal string) (*poster, error) {
	up := strings.ToUpper(signal)
	u := os.Getenv("OTEL_EXPORTER_OTLP_" + up + "_ENDPOINT")
	if u == "" {
		base := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			base = "http://localhost:4318"
		}
		u = strings.TrimSuffix(base, "/") + "/v1/" + signal
	}
	if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("OTLP %s endpoint %q: want an http:// or https:// URL (OTEL_EXPORTER_OTLP_ENDPOINT, e.g. http://collector:4318)", signal, u)
	}
	h := http.Header{}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_" + up + "_HEADERS"} {
		for _, kv := range strings.Split(os.Getenv(k), ",") {
			name, val, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			name, _ = url.QueryUnescape(strings.TrimSpace(name))
			val, _ = url.QueryUnescape(strings.TrimSpace(val))
			h.Set(name, val)
		}
	}
	timeout := 10 * time.Second
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_" + up + "_TIMEOUT"} {
		if ms, err := strconv.Atoi(os.Getenv(k)); err == nil && ms > 0 {
			timeout = time.Duration(ms) * time.Millisecond
		}
	}
	return &poster{url: u, headers: h, http: &http.Client{Timeout: timeout}}, nil
}

// post sends one export request: field 1 of ExportTraceServiceRequest and
// ExportMetricsServiceRequest repeats the resource's message.
func (p *poster) post(ctx context.Context, msgs []proto.Message) error {
	var body []byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			return err
		}
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendBytes(body, b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = p.headers.Clone()
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP export to %s: %w", p.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("OTLP export to %s: %s %s", p.url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// traceClient is the otlptrace exporter's Client.
type traceClient struct{ p *poster }

func (traceClient) Start(context.Context) error { return nil }
func (traceClient) Stop(context.Context) error  { return nil }
func (c traceClient) UploadTraces(ctx context.Context, rs []*tracepb.ResourceSpans) error {
	msgs := make([]proto.Message, len(rs))
	for i := range rs {
		msgs[i] = rs[i]
	}
	return c.p.post(ctx, msgs)
}

// metricPusher pushes the Prometheus registry every interval and once more
// on shutdown.
type metricPusher struct {
	p        *poster
	g        prometheus.Gatherer
	res      *resourcepb.Resource
	start    uint64
	stopc    chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func startPusher(p *poster, g prometheus.Gatherer, res *resource.Resource) *metricPusher {
	interval := 60 * time.Second
	if ms, err := strconv.Atoi(os.Getenv("OTEL_METRIC_EXPORT_INTERVAL")); err == nil && ms > 0 {
		interval = time.Duration(ms) * time.Millisecond
	}
	m := &metricPusher{p: p, g: g, res: resourceProto(res), start: uint64(ProcessStart.UnixNano()),
		stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-m.stopc:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), p.http.Timeout)
				_ = m.push(ctx) // the next push carries the same cumulative values
				cancel()
			}
		}
	}()
	return m
}

// shutdown stops the ticker and pushes the metrics as they are now.
func (m *metricPusher) shutdown(ctx context.Context) error {
	m.stopOnce.Do(func() { close(m.stopc) })
	<-m.done
	return m.push(ctx)
}

func (m *metricPusher) push(ctx context.Context) error {
	fams, err := m.g.Gather()
	if err != nil && len(fams) == 0 {
		return fmt.Errorf("reading the metrics: %w", err)
	}
	now := uint64(time.Now().UnixNano())
	var ms []*metricspb.Metric
	for _, f := range fams {
		if pm := metricProto(f, m.start, now); pm != nil {
			ms = append(ms, pm)
		}
	}
	rm := &metricspb.ResourceMetrics{Resource: m.res, ScopeMetrics: []*metricspb.ScopeMetrics{{
		Scope: &commonpb.InstrumentationScope{Name: ScopeName}, Metrics: ms}}}
	return m.p.post(ctx, []proto.Message{rm})
}

// metricProto converts a Prometheus family: counters to cumulative
// monotonic sums, gauges (and untyped) to gauges, histograms to cumulative
// explicit-bucket histograms, summaries to summaries. Names stay
// Prometheus's (controller_runtime_reconcile_total).
func metricProto(f *dto.MetricFamily, start, now uint64) *metricspb.Metric {
	m := &metricspb.Metric{Name: f.GetName(), Description: f.GetHelp()}
	cum := metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	var nums []*metricspb.NumberDataPoint
	number := func(pm *dto.Metric, v float64) {
		nums = append(nums, &metricspb.NumberDataPoint{Attributes: labelsProto(pm.GetLabel()), StartTimeUnixNano: start, TimeUnixNano: now,
			Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v}})
	}
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		for _, pm := range f.GetMetric() {
			number(pm, pm.GetCounter().GetValue())
		}
		m.Data = &metricspb.Metric_Sum{Sum: &metricspb.Sum{AggregationTemporality: cum, IsMonotonic: true, DataPoints: nums}}
	case dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
		for _, pm := range f.GetMetric() {
			number(pm, pm.GetGauge().GetValue()+pm.GetUntyped().GetValue())
		}
		m.Data = &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: nums}}
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		var hs []*metricspb.HistogramDataPoint
		for _, pm := range f.GetMetric() {
			h := pm.GetHistogram()
			dp := &metricspb.HistogramDataPoint{Attributes: labelsProto(pm.GetLabel()), StartTimeUnixNano: start, TimeUnixNano: now,
				Count: h.GetSampleCount(), Sum: proto.Float64(h.GetSampleSum())}
			var below uint64
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == posInf {
					continue
				}
				dp.ExplicitBounds = append(dp.ExplicitBounds, b.GetUpperBound())
				dp.BucketCounts = append(dp.BucketCounts, b.GetCumulativeCount()-below)
				below = b.GetCumulativeCount()
			}
			dp.BucketCounts = append(dp.BucketCounts, h.GetSampleCount()-below)
			hs = append(hs, dp)
		}
		m.Data = &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{AggregationTemporality: cum, DataPoints: hs}}
	case dto.MetricType_SUMMARY:
		var ss []*metricspb.SummaryDataPoint
		for _, pm := range f.GetMetric() {
			s := pm.GetSummary()
			dp := &metricspb.SummaryDataPoint{Attributes: labelsProto(pm.GetLabel()), StartTimeUnixNano: start, TimeUnixNano: now,
				Count: s.GetSampleCount(), Sum: s.GetSampleSum()}
			for _, q := range s.GetQuantile() {
				dp.QuantileValues = append(dp.QuantileValues, &metricspb.SummaryDataPoint_ValueAtQuantile{Quantile: q.GetQuantile(), Value: q.GetValue()})
			}
			ss = append(ss, dp)
		}
		m.Data = &metricspb.Metric_Summary{Summary: &metricspb.Summary{DataPoints: ss}}
	default:
		return nil
	}
	return m
}

var posInf = func() float64 { f, _ := strconv.ParseFloat("+Inf", 64); return f }()

func labelsProto(ls []*dto.LabelPair) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, len(ls))
	for i, l := range ls {
		out[i] = &commonpb.KeyValue{Key: l.GetName(), Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: l.GetValue()}}}
	}
	return out
}

func resourceProto(r *resource.Resource) *resourcepb.Resource {
	out := &resourcepb.Resource{}
	for _, kv := range r.Attributes() {
		v := &commonpb.AnyValue{}
		switch kv.Value.Type() {
		case attribute.BOOL:
			v.Value = &commonpb.AnyValue_BoolValue{BoolValue: kv.Value.AsBool()}
		case attribute.INT64:
			v.Value = &commonpb.AnyValue_IntValue{IntValue: kv.Value.AsInt64()}
		case attribute.FLOAT64:
			v.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: kv.Value.AsFloat64()}
		default:
			v.Value = &commonpb.AnyValue_StringValue{StringValue: kv.Value.Emit()}
		}
		out.Attributes = append(out.Attributes, &commonpb.KeyValue{Key: string(kv.Key), Value: v})
	}
	return out
}
