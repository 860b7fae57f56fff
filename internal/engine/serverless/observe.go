package serverless

import (
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/telemetry"
)

// The engine's telemetry (package telemetry: metrics, the delivery's log
// line, spans) is told from a few calls: ServeHTTP begins and ends a
// Delivery and describes its event (described), route's keys become
// Arrivals (routed.arrival), runOnce wraps each reconcile in a Run and ends
// it with the settled verdict (observed).

// described tells d what ev is: its CloudEvent id, type, source and wake reason.
func described(d *telemetry.Delivery, ev any) {
	switch ev := ev.(type) {
	case *cloudevent.ObjectEvent:
		reason := map[cloudevent.Action]string{cloudevent.Add: "create", cloudevent.Update: "update", cloudevent.Delete: "delete"}[ev.Action]
		typ := "dev.knative.apiserver." + map[cloudevent.Mode]string{cloudevent.Resource: "resource", cloudevent.Reference: "ref"}[ev.Mode] + "." + string(ev.Action)
		d.Event(ev.ID, typ, fmt.Sprintf("%s %s", ev.Kind, key(ev.Namespace, ev.Name)), reason+" "+ev.Kind)
	case *cloudevent.Ping:
		reason := "sweep"
		switch {
		case len(ev.Data) > 0 && string(ev.Data) != "{}" && pingSweepAll(ev.Data):
			reason = "full_sweep"
		case len(ev.Data) > 0 && string(ev.Data) != "{}":
			reason = "ping"
		}
		d.Event(ev.ID, cloudevent.PingType, ev.Source, reason)
	case *cloudevent.Wakeup:
		d.Event(ev.ID, cloudevent.WakeupType, ev.Source, "wakeup "+ev.Reason)
	case *cloudevent.Other:
		d.Event(ev.Event.ID(), ev.Event.Type(), ev.Event.Source(), "external")
	}
}

func pingSweepAll(data []byte) bool {
	var d pingData
	return json.Unmarshal(data, &d) == nil && d.Sweep == "all"
}

// routedTo tells d the keys of rt.
func routedTo(d *telemetry.Delivery, rt *routed) {
	keys := make([]string, len(rt.keys))
	for i, k := range rt.keys {
		keys[i] = k.String()
	}
	d.Routed(keys, rt.why)
	rt.delivery = d
}

// arrivalsOf are the telemetry arrivals folded into a run.
func arrivalsOf(arrivals []*arrival) []telemetry.Arrival {
	out := make([]telemetry.Arrival, 0, len(arrivals))
	for _, a := range arrivals {
		if a != nil {
			out = append(out, a.obs)
		}
	}
	return out
}

// observed ends run with what settle decided of a reconcile that returned res.
func observed(run *telemetry.Run, res reconcile.Result, v *Verdict) {
	r := telemetry.Result{Label: "success", Scheduled: v.Next > 0}
	switch {
	case v.Err != nil:
		r.Label, r.Err, r.Terminal = "error", v.Err, errors.Is(v.Err, reconcile.TerminalError(nil))
	case res.RequeueAfter > 0:
		r.Label = "requeue_after"
	case res.Requeue: //nolint:staticcheck // counted as controller-runtime does
		r.Label = "requeue"
	}
	run.End(r)
}
