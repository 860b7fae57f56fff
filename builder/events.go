package builder

import (
	"context"
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/eventfilter"
)

// EventFilter says which external CloudEvents (sent to the operator's
// Knative Broker) reach an EventMapFunc, in a Knative Trigger's own terms:
// `opzero manifests` writes it into the Trigger, and the engines and
// `opzero dev` match it with Knative's semantics. Set one of the two.
type EventFilter struct {
	// Attributes: exact match of each CloudEvent attribute or extension, as
	// Knative Trigger spec.filter.attributes ("" matches any non-empty value).
	Attributes map[string]string
	// Filters: Knative's filters dialects (exact, prefix, suffix, all, any,
	// not), as Trigger spec.filters; all entries must pass.
	Filters []TriggerFilter
}

// TriggerFilter is one entry of a Knative Trigger's spec.filters: exactly
// one of its fields is set. Attribute names are lower-case letters and
// digits (type, source, subject, or an extension such as dbname).
type TriggerFilter struct {
	// Exact passes when every named attribute equals its value.
	Exact map[string]string
	// Prefix passes when every named attribute starts with its value.
	Prefix map[string]string
	// Suffix passes when every named attribute ends with its value.
	Suffix map[string]string
	// All passes when every nested filter passes.
	All []TriggerFilter
	// Any passes when at least one nested filter passes.
	Any []TriggerFilter
	// Not passes when the nested filter does not.
	Not *TriggerFilter
}

// EventMapFunc maps an external CloudEvent that passed its filter to the
// requests to reconcile. There may be no cache: c reads from the API
// server. No requests means the event is acknowledged (2xx) with nothing to
// do. An error wrapped in reconcile.TerminalError says the event itself is
// bad (a serverless operator answers 400: not retried, dead-lettered); any
// other error (the API server could not be read) makes it answer 503, so
// that the Broker retries the event.
type EventMapFunc func(ctx context.Context, c client.Reader, e cloudevents.Event) ([]reconcile.Request, error)

// EventWatch is one WatchesEvents: a Knative Trigger on the operator's
// Broker, and how its events map to primary keys.
type EventWatch struct {
	// Name names the Trigger (unique within the operator).
	Name   string
	Filter EventFilter
	Map    EventMapFunc
}

// WatchesEvents adds external CloudEvents: those posted to the operator's
// Knative Broker that pass filter are mapped by fn to requests. name names
// the Trigger that `opzero manifests` generates for it, as
// <operator>-<name> like every object it generates (a DNS label, unique
// within the operator).
func (b *Builder) WatchesEvents(name string, filter EventFilter, fn EventMapFunc) *Builder {
	var errs []error
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, fmt.Errorf("WatchesEvents(%q): the name %s", name, msg))
	}
	for _, w := range b.op.Events {
		if w.Name == name {
			errs = append(errs, fmt.Errorf("WatchesEvents(%q): the name is used twice; give each Trigger its own name", name))
		}
	}
	if fn == nil {
		errs = append(errs, fmt.Errorf("WatchesEvents(%q): the map function is nil", name))
	}
	spec := filter.spec()
	if spec.Empty() {
		errs = append(errs, fmt.Errorf("WatchesEvents(%q): the filter is empty: match at least one attribute (e.g. type), or every event of the Broker would reach this map function", name))
	} else if err := spec.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("WatchesEvents(%q): bad filter: %w", name, err))
	}
	if len(errs) > 0 {
		b.errs = append(b.errs, errs...)
		return b
	}
	b.op.Events = append(b.op.Events, EventWatch{Name: name, Filter: filter, Map: fn})
	return b
}

// Validate reports every problem of f at once (Knative's Trigger rules:
// attribute names of lower-case letters and digits, one dialect per
// TriggerFilter, no empty values in exact, prefix or suffix; Attributes and
// Filters not both set, since Knative ignores Attributes then).
func (f EventFilter) Validate() error { return f.spec().Validate() }

// Match says whether e passes f, exactly as a Knative Trigger decides.
func (f EventFilter) Match(e cloudevents.Event) bool { return f.spec().Match(e) }

// String is a short form of f for logs and error messages.
func (f EventFilter) String() string { return f.spec().String() }

func (f EventFilter) spec() eventfilter.Spec {
	s := eventfilter.Spec{Attributes: f.Attributes}
	for _, t := range f.Filters {
		s.Filters = append(s.Filters, t.spec())
	}
	return s
}

func (t TriggerFilter) spec() eventfilter.Filter {
	f := eventfilter.Filter{Exact: t.Exact, Prefix: t.Prefix, Suffix: t.Suffix}
	for _, a := range t.All {
		f.All = append(f.All, a.spec())
	}
	for _, a := range t.Any {
		f.Any = append(f.Any, a.spec())
	}
	if t.Not != nil {
		n := t.Not.spec()
		f.Not = &n
	}
	return f
}
