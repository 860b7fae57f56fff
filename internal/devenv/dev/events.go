package dev

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opzero/opzero/internal/devenv/activator"
)

// Event is one line of `opzero dev --events=json`: a machine-readable
// record of what the human log says, one JSON object per line, written as
// it happens. Fields that do not apply to an event are left out.
type Event struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"` // one of the Event* constants

	// Service is the Knative Service (namespace/name) the event concerns;
	// Deployment the ko:// Deployment.
	Service    string `json:"service,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	// Process is what a supervised process plays ("ApiServerSource ns/name",
	// "mtping", "Deployment ns/name"): EventProcessRestarted, EventSweep,
	// and EventError of a restart.
	Process string `json:"process,omitempty"`

	// EventProcessStarted, EventProcessReady, EventProcessStopped; of
	// EventDelivery: the instance that took the request.
	PID int `json:"pid,omitempty"`
	// Started with no instance running; of EventDelivery: the request
	// waited for that start (it paid a cold start).
	ColdStart bool    `json:"coldStart,omitempty"`
	ReadyMS   float64 `json:"readyMs,omitempty"` // exec to ready
	Reason    string  `json:"reason,omitempty"`  // stopped: idle, shutdown or exited; restarted: why
	ExitCode  *int    `json:"exitCode,omitempty"`

	// EventDelivery: the CloudEvent's source and type, the object it names
	// (the kind, namespace and name extensions of ApiServerSource events,
	// the target of a wakeup, else the subject), why the operator was woken
	// (Wake* constants; a wakeup's reason), and the answer: code, time
	// from arrival to answer, Opzero-Result, and Message: the error of a
	// failed reconcile or delivery (the answer's body if not 2xx).
	Source       string  `json:"source,omitempty"`
	Type         string  `json:"type,omitempty"`
	Kind         string  `json:"kind,omitempty"`
	Key          string  `json:"key,omitempty"`
	Wake         string  `json:"wake,omitempty"`
	WakeupReason string  `json:"wakeupReason,omitempty"`
	Code         int     `json:"code,omitempty"`
	DurationMS   float64 `json:"durationMs,omitempty"`
	Result       string  `json:"result,omitempty"` // the operator's Opzero-Result header
	// TraceID is the delivery's W3C trace ID, if the operator's answer
	// names it (Opzero-Trace-Id): find the delivery in the tracing backend.
	TraceID string `json:"traceId,omitempty"`

	// EventReconciled: how many keys the delivery's answer reports reconciled.
	Reconciled int `json:"reconciled,omitempty"`
	// EventReconcileFailed: how many keys' reconciles it reports failed
	// (Message: their verdicts).
	Failed int `json:"failed,omitempty"`

	// EventReady: where the session's logs are and what it plays.
	LogDir   string         `json:"logDir,omitempty"`
	Services []ServiceEvent `json:"services,omitempty"`
	Sources  []string       `json:"sources,omitempty"`

	// EventError: what went wrong, in the words of the human log; also the
	// error of EventDelivery and EventReconcileFailed.
	Message string `json:"message,omitempty"`
}

// ServiceEvent names a Knative Service played locally and its local URL.
type ServiceEvent struct {
	Name string `json:"name"` // namespace/name
	URL  string `json:"url"`
}

// The events of the stream.
const (
	EventReady          = "ready"           // Start has applied the manifests and started everything
	EventProcessStarted = "process-started" // an operator instance or a ko:// Deployment was exec'd
	EventProcessReady   = "process-ready"   // an operator instance became ready (its readiness path, else its port)
	// An always-on hook Deployment's process is not started: a ConfigMap
	// or Secret its volumes name does not exist (Message names it, as a
	// kubelet's FailedMount event). It starts once the object exists
	// (process-started); again if what it waits for changes.
	EventProcessWaiting = "process-waiting"
	EventProcessStopped = "process-stopped" // an instance exited (scaled down, shut down, or on its own)
	EventDelivery       = "delivery"        // a request to a Service was answered
	EventReconciled     = "reconciled"      // a 2xx answer that reports keys reconciled
	// An answer that reports keys whose reconcile failed: a 200 "retry
	// recorded" (durable time), a 500, 422 or 503.
	EventReconcileFailed = "reconcile-failed"
	EventScaledToZero    = "scaled-to-zero" // a Service's last instance stopped for idleness
	// A source's process (adapter, ko:// Deployment) was restarted because it
	// exited, failed its liveness probe, or its watch had a gap; PID is the
	// new process.
	EventProcessRestarted = "process-restarted"
	// After an adapter's gap, a PingSource's tick was sent at once so the
	// operator sweeps what the gap lost (Source names the PingSource).
	EventSweep   = "sweep"
	EventError   = "error"   // an instance failed to start, or the session failed
	EventStopped = "stopped" // Stop has stopped everything
)

// EventWriter writes Events as JSON lines; it is safe for concurrent use
// and a nil *EventWriter discards.
type EventWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewEventWriter writes to w; nil w gives a nil writer (discard).
func NewEventWriter(w io.Writer) *EventWriter {
	if w == nil {
		return nil
	}
	return &EventWriter{enc: json.NewEncoder(w)}
}

// Write stamps e with the time if it has none and writes it as one line.
func (ew *EventWriter) Write(e Event) {
	if ew == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	ew.mu.Lock()
	defer ew.mu.Unlock()
	_ = ew.enc.Encode(e) // a consumer that went away must not stop the session
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// emitReady reports a started session.
func (p *Platform) emitReady() {
	e := Event{Event: EventReady, LogDir: p.opts.Dir, Sources: p.Sources}
	for _, s := range p.Services {
		e.Services = append(e.Services, ServiceEvent{Name: s.Namespace + "/" + s.Name, URL: s.URL})
	}
	p.opts.Events.Write(e)
}

// onProcess turns an activator's process events into the stream's.
func (s *Service) onProcess(ew *EventWriter) func(activator.ProcessEvent) {
	name := s.Namespace + "/" + s.Name
	return func(pe activator.ProcessEvent) {
		e := Event{Service: name, PID: pe.PID}
		switch pe.What {
		case activator.ProcessStarted:
			e.Event, e.ColdStart = EventProcessStarted, pe.Cold
		case activator.ProcessReady:
			e.Event, e.ReadyMS = EventProcessReady, ms(pe.Took)
		case activator.ProcessStopped:
			code := pe.ExitCode
			e.Event, e.Reason, e.ExitCode = EventProcessStopped, pe.Reason, &code
		case activator.ProcessFailed:
			e.Event, e.Message = EventError, "instance pid "+strconv.Itoa(pe.PID)+" did not start: "+pe.Reason
		case activator.ScaledToZero:
			e.Event = EventScaledToZero
		default:
			return
		}
		ew.Write(e)
	}
}

// emitDelivery reports one answered request, and the reconciles its answer
// reports.
func (s *Service) emitDelivery(ew *EventWriter, d Delivery) {
	if ew == nil {
		return
	}
	name := s.Namespace + "/" + s.Name
	ew.Write(deliveryEvent(name, d))
	if d.Reconciled > 0 {
		ew.Write(Event{Event: EventReconciled, Service: name, Kind: d.Kind, Key: d.Key(), Reconciled: d.Reconciled,
			Result: strings.TrimSpace(d.Result)})
	}
	if d.Failed > 0 {
		ew.Write(Event{Event: EventReconcileFailed, Service: name, Kind: d.Kind, Key: d.Key(), Failed: d.Failed,
			Code: d.Code, Message: d.Error})
	}
}

func deliveryEvent(service string, d Delivery) Event {
	return Event{Time: d.At, Event: EventDelivery, Service: service, Source: d.Source, Type: d.Type, Kind: d.Kind, Key: d.Key(),
		Wake: d.Wake, WakeupReason: d.WakeupReason, PID: d.Instance, ColdStart: d.Cold,
		Code: d.Code, DurationMS: ms(d.Took), Result: d.Result, Message: d.Error, TraceID: d.TraceID}
}

// DeliveryLine is the line `opzero dev -v` prints for a delivery event:
// time, Service, why it was woken, the object, the instance (and whether
// the request waited for a cold start), code, latency, the trace if the
// operator names it, and the answer.
func DeliveryLine(e Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", e.Time.Format("15:04:05.000"), e.Service, firstNonEmpty(e.Wake, WakeExternal))
	if e.WakeupReason != "" {
		fmt.Fprintf(&b, " (%s)", e.WakeupReason)
	}
	if e.Kind != "" {
		b.WriteString(" " + e.Kind)
	}
	if e.Key != "" {
		b.WriteString(" " + e.Key)
	}
	if e.PID != 0 {
		fmt.Fprintf(&b, " -> pid %d", e.PID)
	} else {
		b.WriteString(" -> no instance")
	}
	if e.ColdStart {
		b.WriteString(" (cold start)")
	}
	fmt.Fprintf(&b, ", %d in %s", e.Code, formatMS(e.DurationMS))
	if e.TraceID != "" {
		b.WriteString(", trace " + e.TraceID)
	}
	if said := firstNonEmpty(e.Message, strings.TrimSpace(e.Result)); said != "" {
		b.WriteString(": " + said)
	}
	return b.String()
}

// formatMS prints a latency with three significant digits at most.
func formatMS(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + " s"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
}
