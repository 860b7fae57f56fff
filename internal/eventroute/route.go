// Package eventroute routes an external CloudEvent (one a Knative Trigger
// delivered from the operator's Broker) to the keys it concerns: every
// builder.WatchesEvents whose filter the event passes (Knative's
// semantics, builder.EventFilter.Match) maps it through its EventMapFunc.
// Both engines use it, so an event reaches the same keys in either mode,
// and answer its errors the same way.
//
// # Guarantees
//
//   - An event that passes no filter is ErrNoRoute, and no map function
//     runs; answered 400 (never retried; a Broker dead-letters it).
//   - A map function's reconcile.TerminalError is Bad (400); any other map
//     error is Transient (503: the Broker retries).
//   - Keys are deduplicated and kept in the order the map functions
//     returned them; no keys is a success with nothing to do (2xx).
package eventroute

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
)

// ResultHeader carries the reason of a 2xx answer (the serverless engine's
// header of the same name).
const ResultHeader = "Opzero-Result"

// ErrNoRoute: the event passes none of the operator's filters.
var ErrNoRoute = errors.New("no route")

// Bad is an event a map function refused (reconcile.TerminalError): 400.
type Bad struct{ error }

func (b Bad) Unwrap() error { return b.error }

// Transient is a map function's failure that a retry may not meet (the API
// server could not be read): 503.
type Transient struct{ error }

func (t Transient) Unwrap() error { return t.error }

// Routed is where an event goes.
type Routed struct {
	Keys []reconcile.Request
	// Via names the WatchesEvents (Triggers) whose filter it passed.
	Via []string
}

// Why is a short reason for logs and the Opzero-Result header.
func (r Routed) Why(e event.Event) string {
	why := fmt.Sprintf("event %s %s via %s", e.Type(), e.ID(), strings.Join(r.Via, ", "))
	if len(r.Keys) == 0 {
		why += ": maps to no key, nothing to do"
	}
	return why
}

// Route maps e through every WatchesEvents of op whose filter it passes.
func Route(ctx context.Context, op *builder.Controller, c client.Reader, e event.Event) (Routed, error) {
	var r Routed
	seen := map[reconcile.Request]bool{}
	for _, w := range op.Events {
		if !w.Filter.Match(e) {
			continue
		}
		r.Via = append(r.Via, w.Name)
		keys, err := w.Map(ctx, c, e)
		if err != nil {
			err = fmt.Errorf("mapping event %s (type %s, source %s) through %s: %w", e.ID(), e.Type(), e.Source(), w.Name, err)
			if errors.Is(err, reconcile.TerminalError(nil)) {
				return r, Bad{err}
			}
			return r, Transient{err}
		}
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				r.Keys = append(r.Keys, k)
			}
		}
	}
	if len(r.Via) == 0 {
		return r, fmt.Errorf("%w for event type %q from %q: %s", ErrNoRoute, e.Type(), e.Source(), Filters(op))
	}
	return r, nil
}

// Filters says which external events op takes, for error messages.
func Filters(op *builder.Controller) string {
	if len(op.Events) == 0 {
		return "operator " + op.Name + " takes no Broker events (builder.WatchesEvents)"
	}
	var fs []string
	for _, w := range op.Events {
		fs = append(fs, w.Name+" ("+w.Filter.String()+")")
	}
	return "operator " + op.Name + " takes Broker events passing " + strings.Join(fs, " or ")
}
