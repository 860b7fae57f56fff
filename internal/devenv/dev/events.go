package dev

import (
	"encoding/json"
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

	// EventProcessStarted, EventProcessReady, EventProcessStopped.
	PID       int     `json:"pid,omitempty"`
	ColdStart bool    `json:"coldStart,omitempty"` // started with no instance running
	ReadyMS   float64 `json:"readyMs,omitempty"`   // exec to ready
	Reason    string  `json:"reason,omitempty"`    // stopped: idle, shutdown or exited; restarted: why
	ExitCode  *int    `json:"exitCode,omitempty"`

	// EventDelivery: the CloudEvent's source and type, the object it names
	// (the kind, namespace and name extensions of ApiServerSource events, else
	// the subject), and the answer.
	Source     string  `json:"source,omitempty"`
	Type       string  `json:"type,omitempty"`
	Kind       string  `json:"kind,omitempty"`
	Key        string  `json:"key,omitempty"`
	Code       int     `json:"code,omitempty"`
	DurationMS float64 `json:"durationMs,omitempty"`
	Result     string  `json:"result,omitempty"` // the operator's Opzero-Result header

	// EventReconciled: how many keys the delivery's answer reports reconciled.
	Reconciled int `json:"reconciled,omitempty"`

	// EventReady: where the session's logs are and what it plays.
	LogDir   string         `json:"logDir,omitempty"`
	Services []ServiceEvent `json:"services,omitempty"`
	Sources  []string       `json:"sources,omitempty"`

	// EventError: what went wrong, in the words of the human log.
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
	EventProcessReady   = "process-ready"   // an operator instance answered /healthz
	EventProcessStopped = "process-stopped" // an instance exited (scaled down, shut down, or on its own)
	EventDelivery       = "delivery"        // a request to a Service was answered
	EventReconciled     = "reconciled"      // a 2xx answer that reports keys reconciled
	EventScaledToZero   = "scaled-to-zero"  // a Service's last instance stopped for idleness
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
func (s *Service) emitDelivery(ew *EventWriter, d Delivery, n int) {
	if ew == nil {
		return
	}
	name := s.Namespace + "/" + s.Name
	key := d.Name
	if d.Namespace != "" {
		key = d.Namespace + "/" + d.Name
	}
	if key == "" {
		key = d.Subject
	}
	ew.Write(Event{Time: d.At, Event: EventDelivery, Service: name, Source: d.Source, Type: d.Type, Kind: d.Kind, Key: key,
		Code: d.Code, DurationMS: ms(d.Took), Result: d.Result})
	if n > 0 {
		ew.Write(Event{Event: EventReconciled, Service: name, Kind: d.Kind, Key: key, Reconciled: n,
			Result: strings.TrimSpace(d.Result)})
	}
}
