package serverless

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/eventroute"
)

// routeExternal routes a CloudEvent that no Knative source sent: one a
// Trigger delivered from the operator's Broker (builder.WatchesEvents;
// package eventroute). An event no filter passes, or whose map function
// returned a reconcile.TerminalError, is a 400 (never retried; a Broker
// dead-letters it); any other map error is transient (503: the Broker
// retries).
func (e *Engine) routeExternal(ctx context.Context, ev *cloudevent.Other) (*routed, error) {
	r, err := eventroute.Route(ctx, e.op, e.c, *ev.Event)
	var t eventroute.Transient
	switch {
	case errors.Is(err, eventroute.ErrNoRoute):
		return nil, fmt.Errorf("no route for event type %q from %q: operator %s takes ApiServerSource events for %s and PingSource events; %s",
			ev.Event.Type(), ev.Event.Source(), e.op.Name, strings.Join(e.kinds(), ", "), eventroute.Filters(e.op))
	case errors.As(err, &t):
		return nil, transient{err}
	case err != nil:
		return nil, err
	}
	rt := &routed{why: r.Why(*ev.Event)}
	for _, k := range r.Keys {
		rt.add(k)
	}
	return rt, nil
}
