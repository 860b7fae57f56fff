package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/opzero/opzero/internal/cloudevent/receive"
	"github.com/opzero/opzero/internal/eventfilter"
)

// MaxEventBytes bounds an event the ingress takes (Knative's default
// broker has no smaller limit that senders rely on).
const MaxEventBytes = 4 << 20

// ArrivalTimeExtension is the extension Knative's Broker ingress stamps on
// every event it accepts (RFC 3339).
const ArrivalTimeExtension = "knativearrivaltime"

// Trigger is one Trigger of a Broker, resolved.
type Trigger struct {
	// Name is namespace/name, for logs.
	Name       string
	Filter     eventfilter.Spec
	Subscriber Target
	Delivery   Delivery
	// Token returns a token of the Trigger's OIDC identity for an audience
	// (nil: none is sent).
	Token func(ctx context.Context, audience string) (string, error)
}

// Options configures an Ingress.
type Options struct {
	// Client sends the deliveries (default: a client with a 5 min timeout,
	// Knative Serving's default request timeout).
	Client *http.Client
	// Sleep waits between attempts (default: a timer that ctx cancels);
	// tests record the waits instead of taking them.
	Sleep func(ctx context.Context, d time.Duration) error
	// Logf receives a line per event dead-lettered or dropped (nil discards).
	Logf func(format string, args ...any)
	// Delivered, if set, is told the outcome of each event at each Trigger.
	Delivered func(Outcome)
}

// Outcome is what became of one event at one Trigger.
type Outcome struct {
	Trigger  string
	EventID  string
	Attempts int // to the subscriber
	Code     int // the subscriber's last answer (500 when it did not answer)
	// Delivered: the subscriber answered 2xx. DeadLettered: the dead-letter
	// sink answered 2xx. Neither: dropped.
	Delivered, DeadLettered bool
}

// Ingress is the Brokers' ingress: an http.Handler for /<namespace>/<name>.
type Ingress struct {
	opts    Options
	ctx     context.Context
	mu      sync.RWMutex
	brokers map[string][]*Trigger // namespace/name
	wg      sync.WaitGroup
}

// New returns an ingress whose deliveries stop when ctx ends.
func New(ctx context.Context, o Options) *Ingress {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Minute}
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	return &Ingress{opts: o, ctx: ctx, brokers: map[string][]*Trigger{}}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Set makes the Broker namespace/name take events, sent on to triggers.
func (in *Ingress) Set(namespace, name string, triggers []*Trigger) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.brokers[namespace+"/"+name] = triggers
}

// Path is the path of the Broker's address on the ingress.
func Path(namespace, name string) string { return "/" + namespace + "/" + name }

// Wait returns once every delivery started so far has ended.
func (in *Ingress) Wait() { in.wg.Wait() }

// ServeHTTP accepts one event for a Broker: 202, or 400 (not a valid
// CloudEvent), 404 (no such Broker), 405, 413.
func (in *Ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.Trim(r.URL.Path, "/")
	in.mu.RLock()
	triggers, ok := in.brokers[key]
	in.mu.RUnlock()
	if !ok || strings.Count(key, "/") != 1 {
		http.Error(w, fmt.Sprintf("no Broker at %s: POST to /<namespace>/<broker>, a Broker's status.address.url", r.URL.Path), http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a CloudEvent here", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxEventBytes)
	ev, err := receive.Read(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("event larger than %d bytes", MaxEventBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "Broker "+key+": "+err.Error(), http.StatusBadRequest)
		return
	}
	ev.SetExtension(ArrivalTimeExtension, time.Now().UTC().Format(time.RFC3339Nano))
	for _, t := range triggers {
		if !t.Filter.Match(*ev) {
			continue
		}
		e := ev.Clone()
		in.wg.Add(1)
		go func() { defer in.wg.Done(); in.dispatch(t, &e) }()
	}
	w.WriteHeader(http.StatusAccepted)
}
