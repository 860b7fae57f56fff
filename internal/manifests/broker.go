package manifests

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/eventfilter"
)

// brokerName is --broker, else (the operator takes external events) the
// operator's name: its own Broker.
func (g *gen) brokerName() string {
	if g.o.Broker == "" && len(g.op.Events) > 0 {
		return g.name()
	}
	return g.o.Broker
}

// triggerNames are the Triggers that deliver to the operator: one per
// WatchesEvents (<operator>-<name>), else with --broker one for the
// Broker's events (<operator>-<broker>).
func (g *gen) triggerNames() []string {
	var out []string
	for _, w := range g.op.Events {
		out = append(out, g.name()+"-"+w.Name)
	}
	if len(out) == 0 && g.o.Broker != "" {
		out = append(out, g.name()+"-"+g.o.Broker)
	}
	return out
}

// broker is the Broker and the Triggers that subscribe the operator to it:
// one per WatchesEvents filter (spec.filter.attributes or spec.filters,
// as the operator declared it), else one for --trigger-type. Each delivers
// to the operator's sink with its audience (the Trigger's OIDC identity is
// among the allowed senders) and the delivery policy.
func (g *gen) broker() []Object {
	d := g.o.Delivery
	delivery := map[string]any{"retry": int64(d.Retry), "backoffPolicy": d.BackoffPolicy, "backoffDelay": d.BackoffDelay}
	if d.DeadLetterSink != "" {
		delivery["deadLetterSink"] = map[string]any{"uri": d.DeadLetterSink}
	}
	l := g.labels("broker")
	b := object("eventing.knative.dev/v1", "Broker", g.o.Namespace, g.brokerName(), l)
	b["spec"] = map[string]any{"delivery": delivery}
	objs := []Object{{File: FileBroker, Obj: b}}
	names := g.triggerNames()
	for i, name := range names {
		t := object("eventing.knative.dev/v1", "Trigger", g.o.Namespace, name, l)
		spec := map[string]any{"broker": g.brokerName(), "subscriber": g.sink(), "delivery": delivery}
		if len(g.op.Events) > 0 {
			for k, v := range triggerFilter(g.op.Events[i]) {
				spec[k] = v
			}
		} else if g.o.TriggerType != "" {
			spec["filter"] = map[string]any{"attributes": map[string]any{"type": g.o.TriggerType}}
		}
		t["spec"] = spec
		objs = append(objs, Object{File: FileBroker, Obj: t})
	}
	return objs
}

// triggerFilter is a WatchesEvents filter as Trigger spec fields: the
// description's JSON is Knative's.
func triggerFilter(w description.EventWatch) map[string]any {
	out := map[string]any{}
	if len(w.Attributes) > 0 {
		attrs := map[string]any{}
		for k, v := range w.Attributes {
			attrs[k] = v
		}
		out["filter"] = map[string]any{"attributes": attrs}
	}
	if len(w.Filters) > 0 {
		b, _ := json.Marshal(w.Filters) // plain maps and slices: cannot fail
		var fs []any
		_ = json.Unmarshal(b, &fs)
		out["filters"] = fs
	}
	return out
}

// checkEvents re-checks the filters the operator described (its binary
// validated them; this catches a description from elsewhere) and the
// options that conflict with them.
func (g *gen) checkEvents() error {
	if len(g.op.Events) == 0 {
		return nil
	}
	if g.o.TriggerType != "" {
		return fmt.Errorf("--trigger-type=%q: the operator declares its Triggers (WatchesEvents %s); drop --trigger-type", g.o.TriggerType, g.eventNames())
	}
	for _, w := range g.op.Events {
		b, err := json.Marshal(w)
		if err != nil {
			return err
		}
		var spec eventfilter.Spec
		if err := json.Unmarshal(b, &spec); err != nil {
			return fmt.Errorf("the operator's event filter %s: %w", w.Name, err)
		}
		if err := spec.Validate(); err != nil {
			return fmt.Errorf("the operator's event filter %s: %w", w.Name, err)
		}
		for _, msg := range validation.IsDNS1123Subdomain(g.name() + "-" + w.Name) {
			return fmt.Errorf("Trigger name %s-%s: %s", g.name(), w.Name, msg)
		}
	}
	return nil
}

func (g *gen) eventNames() string {
	var ns []string
	for _, w := range g.op.Events {
		ns = append(ns, w.Name)
	}
	return strings.Join(ns, ", ")
}
