package telemetry

import (
	"github.com/opzero/opzero/internal/telemetry/otlpexport"

	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Response headers every delivery's answer carries (for `opzero dev` and
// other senders that want to know what their event cost).
const (
	// WakeReasonHeader: create, update, delete (with the kind: "update
	// ConfigMap"), sweep, full_sweep, ping, wakeup or external.
	WakeReasonHeader = "Opzero-Wake-Reason"
	// ColdStartHeader: "true" on the first delivery this process handled.
	ColdStartHeader = "Opzero-Cold-Start"
	// ReconcilesHeader: how many reconciles ran for this delivery.
	ReconcilesHeader = "Opzero-Reconciles"
	// TraceHeader: the W3C trace ID of this delivery, if it has one.
	TraceHeader = "Opzero-Trace-Id"
)

const tracerName = otlpexport.ScopeName

// Observer is what the serverless engine tells about its work: one
// Delivery per HTTP request, one Run per reconcile. It keeps the metrics,
// writes the delivery's log line and makes the spans. Its methods are safe
// for concurrent use.
type Observer struct {
	controller string
	log        logr.Logger
	m          *Metrics
	delivered  atomic.Bool // a delivery was seen: later ones are warm
	reconciled atomic.Bool // the first reconcile ended
}

// NewObserver returns the observer of one controller; log receives one
// line per delivery at info level.
func NewObserver(controller string, maxConcurrent int, log logr.Logger) *Observer {
	o := &Observer{controller: controller, log: log, m: Default()}
	o.m.WorkerCount.WithLabelValues(controller).Set(float64(maxConcurrent))
	return o
}

func tracer() trace.Tracer { return otel.Tracer(tracerName) }

// Delivery is one HTTP request to the engine, from intake to answer.
type Delivery struct {
	o     *Observer
	start time.Time
	span  trace.Span
	cold  bool
	// authT is the time from the request's arrival (Arrived) to Intake:
	// its authentication; -1 if the arrival was not stamped.
	authT time.Duration

	// What the event is; set by the engine once decoded (Event, Routed).
	id, typ, source, reason string
	keys                    []string
	why                     string

	reconciles atomic.Int32
	reconcileT atomic.Int64 // nanoseconds of reconcile time for this delivery
	code       int
}

// Intake begins a delivery: it takes the W3C trace context from r (the
// traceparent header, or the CloudEvent's traceparent extension as the
// ce-traceparent header) or starts a trace, and starts the intake span.
// The returned context carries the span: pass it to what the delivery
// calls, so that API calls and reconciles join the trace.
func (o *Observer) Intake(r *http.Request) (context.Context, *Delivery) {
	d := &Delivery{o: o, start: time.Now(), cold: !o.delivered.Swap(true), authT: -1}
	ctx := r.Context()
	if at, ok := ctx.Value(arrivalKey{}).(time.Time); ok {
		d.start, d.authT = at, d.start.Sub(at)
	}
	h := propagation.HeaderCarrier(r.Header)
	if r.Header.Get("traceparent") == "" && r.Header.Get("ce-traceparent") != "" {
		h = propagation.HeaderCarrier{"Traceparent": {r.Header.Get("ce-traceparent")}, "Tracestate": {r.Header.Get("ce-tracestate")}}
	}
	ctx = propagation.TraceContext{}.Extract(ctx, h)
	ctx, d.span = tracer().Start(ctx, "intake", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("opzero.controller", o.controller), attribute.Bool("opzero.cold_start", d.cold)))
	if d.cold {
		o.m.ColdStarts.WithLabelValues(o.controller).Inc()
	}
	return ctx, d
}

type arrivalKey struct{}

// Arrived stamps r with the time it arrived, for a handler in front of
// the engine's that takes time of its own (authentication): the
// delivery's duration then counts from the arrival, and its log line says
// how long that took (authTime).
func Arrived(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), arrivalKey{}, time.Now()))
}

// Event records what the delivery is: the CloudEvent's id, type and
// source, and the wake reason (see WakeReasonHeader).
func (d *Delivery) Event(id, typ, source, reason string) {
	d.id, d.typ, d.source, d.reason = id, typ, source, reason
	d.span.SetName("intake " + reason)
	d.span.SetAttributes(attribute.String("cloudevents.event_id", id), attribute.String("cloudevents.event_type", typ),
		attribute.String("cloudevents.event_source", source), attribute.String("opzero.reason", reason))
}

// Routed records the keys the event concerns and why.
func (d *Delivery) Routed(keys []string, why string) {
	d.keys, d.why = keys, why
	d.span.SetAttributes(attribute.StringSlice("opzero.keys", keys))
}

// Skipped counts an update acknowledged without a reconcile.
func (o *Observer) Skipped() { o.m.Skipped.WithLabelValues(o.controller).Inc() }

// HandOff counts a key left to the instance holding its Lease.
func (o *Observer) HandOff() { o.m.HandOffs.WithLabelValues(o.controller).Inc() }

// Forward counts an event sent on to the holder of its key's Lease: taken
// (the holder answered) or not (the Lease was marked instead).
func (o *Observer) Forward(taken bool) {
	result := "fallback"
	if taken {
		result = "forwarded"
	}
	o.m.Forwards.WithLabelValues(o.controller, result).Inc()
}

// Arrival is one delivery's contribution to a key's next reconcile, as the
// queue carries it: when it was queued and the trace it belongs to. The
// zero Arrival (a retry timer's) has neither.
type Arrival struct {
	at time.Time
	sc trace.SpanContext
	d  *Delivery
}

// Queued counts one key submitted to the queue for this delivery and
// returns its Arrival.
func (d *Delivery) Queued() Arrival {
	d.o.m.QueueAdds.WithLabelValues(d.o.controller, d.o.controller).Inc()
	d.o.m.QueueDepth.WithLabelValues(d.o.controller, d.o.controller, "").Inc()
	return Arrival{at: time.Now(), sc: d.span.SpanContext(), d: d}
}

// Writer wraps w: the answer's code is recorded, and the headers above are
// set just before it is written.
func (d *Delivery) Writer(w http.ResponseWriter) http.ResponseWriter {
	return &writer{ResponseWriter: w, d: d}
}

type writer struct {
	http.ResponseWriter
	d    *Delivery
	once sync.Once
}

func (w *writer) WriteHeader(code int) {
	if w.d.code != 0 {
		return // written: net/http would say so
	}
	w.once.Do(func() {
		w.d.code = code
		h := w.Header()
		if w.d.reason != "" {
			h.Set(WakeReasonHeader, w.d.reason)
		}
		h.Set(ColdStartHeader, strconv.FormatBool(w.d.cold))
		h.Set(ReconcilesHeader, strconv.Itoa(int(w.d.reconciles.Load())))
		if sc := w.d.span.SpanContext(); sc.HasTraceID() {
			h.Set(TraceHeader, sc.TraceID().String())
		}
	})
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	if w.d.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// End ends the delivery: its log line, its count and its span.
func (d *Delivery) End() {
	code := d.code
	if code == 0 {
		code = http.StatusOK
	}
	reason := d.reason
	if reason == "" {
		reason = "undecoded"
	}
	d.o.m.Events.WithLabelValues(d.o.controller, metricReason(reason), strconv.Itoa(code)).Inc()
	d.span.SetAttributes(attribute.Int("http.response.status_code", code), attribute.Int("opzero.reconciles", int(d.reconciles.Load())))
	if code >= 500 {
		d.span.SetStatus(codes.Error, http.StatusText(code))
	}
	kv := []any{"controller", d.o.controller, "eventID", d.id, "eventType", d.typ, "source", d.source, "reason", reason,
		"keys", strings.Join(d.keys, ","), "coldStart", d.cold, "code", code, "reconciles", d.reconciles.Load(),
		"reconcileTime", time.Duration(d.reconcileT.Load()).String(), "duration", time.Since(d.start).String(), "result", d.why}
	if d.authT >= 0 {
		kv = append(kv, "authTime", d.authT.String())
	}
	if sc := d.span.SpanContext(); sc.HasTraceID() {
		kv = append(kv, "traceID", sc.TraceID().String())
	}
	d.o.log.Info("delivery", kv...)
	d.span.End()
}

// metricReason is the reason without the kind ("update ConfigMap" ->
// "update"): a label with few values.
func metricReason(r string) string {
	if i := strings.IndexByte(r, ' '); i > 0 {
		return r[:i]
	}
	return r
}

// Run is one reconcile of one key.
type Run struct {
	o        *Observer
	start    time.Time
	span     trace.Span
	arrivals []Arrival
}

// Reconcile begins a reconcile of key for the arrivals folded into it: a
// queue-wait span (from the earliest arrival) and the reconcile span, both
// in the first arrival's trace and linked to the others'. The returned
// context carries the reconcile span.
func (o *Observer) Reconcile(ctx context.Context, key string, arrivals []Arrival) (context.Context, *Run) {
	now := time.Now()
	var parent trace.SpanContext
	var links []trace.Link
	earliest := now
	for _, a := range arrivals {
		if a.at.IsZero() {
			continue
		}
		o.m.QueueDepth.WithLabelValues(o.controller, o.controller, "").Dec()
		if a.at.Before(earliest) {
			earliest = a.at
		}
		switch {
		case !parent.IsValid():
			parent = a.sc
		case a.sc.IsValid() && !a.sc.Equal(parent):
			links = append(links, trace.Link{SpanContext: a.sc})
		}
	}
	o.m.QueueLatency.WithLabelValues(o.controller, o.controller).Observe(now.Sub(earliest).Seconds())
	o.m.ActiveWorkers.WithLabelValues(o.controller).Inc()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	attrs := trace.WithAttributes(attribute.String("opzero.controller", o.controller), attribute.String("opzero.key", key))
	if !earliest.Equal(now) {
		_, wait := tracer().Start(ctx, "queue wait", trace.WithTimestamp(earliest), attrs)
		wait.End(trace.WithTimestamp(now))
	}
	ctx, span := tracer().Start(ctx, "reconcile", trace.WithLinks(links...), attrs)
	return ctx, &Run{o: o, start: now, span: span, arrivals: arrivals}
}

// LogValues are the correlation IDs the reconciler's logger carries: the
// trace and span IDs and the events' IDs.
func (r *Run) LogValues() []any {
	var kv []any
	if sc := r.span.SpanContext(); sc.HasTraceID() {
		kv = append(kv, "traceID", sc.TraceID().String(), "spanID", sc.SpanID().String())
	}
	var ids []string
	for _, a := range r.arrivals {
		if a.d != nil && a.d.id != "" {
			ids = append(ids, a.d.id)
		}
	}
	if len(ids) > 0 {
		kv = append(kv, "eventID", strings.Join(ids, ","))
	}
	return kv
}

// Result is how a reconcile ended, in controller-runtime's words.
type Result struct {
	// Label is controller_runtime_reconcile_total's result: success,
	// error, requeue or requeue_after.
	Label string
	// Err is the reconcile's error (Label error); Terminal if it was a
	// reconcile.TerminalError.
	Err      error
	Terminal bool
	// Scheduled: a retry or requeue was scheduled (workqueue retries).
	Scheduled bool
}

// End ends the reconcile with its result.
func (r *Run) End(res Result) {
	d := time.Since(r.start)
	o := r.o
	o.m.ActiveWorkers.WithLabelValues(o.controller).Dec()
	o.m.ReconcileTotal.WithLabelValues(o.controller, res.Label).Inc()
	o.m.ReconcileTime.WithLabelValues(o.controller).Observe(d.Seconds())
	o.m.QueueWork.WithLabelValues(o.controller, o.controller).Observe(d.Seconds())
	if res.Err != nil {
		o.m.ReconcileErrors.WithLabelValues(o.controller).Inc()
		if res.Terminal {
			o.m.TerminalErrors.WithLabelValues(o.controller).Inc()
		}
		r.span.RecordError(res.Err)
		r.span.SetStatus(codes.Error, res.Err.Error())
	}
	if res.Scheduled {
		o.m.QueueRetries.WithLabelValues(o.controller, o.controller).Inc()
	}
	if !o.reconciled.Swap(true) {
		o.m.FirstReconcile.WithLabelValues(o.controller).Set(time.Since(processStart).Seconds())
	}
	for _, a := range r.arrivals {
		if a.d != nil {
			a.d.reconciles.Add(1)
			a.d.reconcileT.Add(int64(d))
		}
	}
	r.span.SetAttributes(attribute.String("opzero.result", res.Label))
	r.span.End()
}
