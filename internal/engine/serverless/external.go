package serverless

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
)

// routeExternal routes a CloudEvent that no Knative source sent: one a
// Trigger delivered from the operator's Broker (builder.WatchesEvents).
// Every EventWatch whose filter the event passes (Knative's semantics, so
// exactly the Triggers that would deliver it) maps it to keys. An event no
// filter passes is unroutable (400: never retried, a Broker dead-letters
// it); a map function's reconcile.TerminalError says the event is
// malformed (400); any other error is transient (503: the Broker retries).
func (e *Engine) routeExternal(ctx context.Context, ev *cloudevent.Other) (*routed, error) {
	rt := &routed{}
	var matched []string
	for _, w := range e.op.Events {
		if !w.Filter.Match(*ev.Event) {
			continue
		}
		matched = append(matched, w.Name)
		keys, err := w.Map(ctx, e.c, *ev.Event)
		if err != nil {
			err = fmt.Errorf("mapping event %s (type %s, source %s) through %s: %w", ev.Event.ID(), ev.Event.Type(), ev.Event.Source(), w.Name, err)
			if errors.Is(err, reconcile.TerminalError(nil)) {
				return nil, err
			}
			return nil, transient{err}
		}
		for _, k := range keys {
			rt.add(k)
		}
	}
	if len(matched) == 0 {
		return nil, e.noRoute(ev)
	}
	rt.why = fmt.Sprintf("event %s %s via %s", ev.Event.Type(), ev.Event.ID(), strings.Join(matched, ", "))
	if len(rt.keys) == 0 {
		rt.why += ": maps to no key, nothing to do"
	}
	return rt, nil
}

func (e *Engine) noRoute(ev *cloudevent.Other) error {
	msg := fmt.Sprintf("no route for event type %q from %q: operator %s takes ApiServerSource events for %s and PingSource events",
		ev.Event.Type(), ev.Event.Source(), e.op.Name, strings.Join(e.kinds(), ", "))
	if len(e.op.Events) > 0 {
		var fs []string
		for _, w := range e.op.Events {
			fs = append(fs, w.Name+" ("+w.Filter.String()+")")
		}
		msg += ", and Broker events passing " + strings.Join(fs, " or ")
	}
	return errors.New(msg)
}
