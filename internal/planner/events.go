package planner

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/plan"
)

// Events is the client the recorders write with in plan mode: an Event
// it is given to create is kept in the plan, never sent; anything else
// goes to the plan's client. A recorder passes no reconcile context, so
// an Event goes to the planned reconcile of the object it regards, or,
// if none is running, to the plan's Events about other objects.
type Events struct {
	client.Client
	mu      sync.Mutex
	running map[plan.Ref]*record // by the reconciled object, Ref without APIVersion
	others  []plan.Event
}

// NewEvents returns the recorders' client over c.
func NewEvents(c client.Client) *Events {
	return &Events{Client: c, running: map[plan.Ref]*record{}}
}

// Create keeps an Event (events.k8s.io/v1 or core/v1) and creates
// anything else through the plan's client.
func (e *Events) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	var ev plan.Event
	switch o := obj.(type) {
	case *eventsv1.Event:
		ev = plan.Event{Regarding: refOfObjectRef(o.Regarding), Type: o.Type, Reason: o.Reason, Action: o.Action, Note: o.Note}
	case *corev1.Event:
		ev = plan.Event{Regarding: refOfObjectRef(o.InvolvedObject), Type: o.Type, Reason: o.Reason, Action: o.Action, Note: o.Message}
	default:
		return e.Client.Create(ctx, obj, opts...)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := ev.Regarding
	k.APIVersion = ""
	if r := e.running[k]; r != nil {
		r.addEvent(ev)
		return nil
	}
	e.others = append(e.others, ev)
	return nil
}

func (e *Events) start(ref plan.Ref, r *record) {
	ref.APIVersion = ""
	e.mu.Lock()
	e.running[ref] = r
	e.mu.Unlock()
}

func (e *Events) end(ref plan.Ref) {
	ref.APIVersion = ""
	e.mu.Lock()
	delete(e.running, ref)
	e.mu.Unlock()
}

// takeOthers returns the Events about objects no planned reconcile was
// running for.
func (e *Events) takeOthers() []plan.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.others
	e.others = nil
	return o
}

func refOfObjectRef(r corev1.ObjectReference) plan.Ref {
	return plan.Ref{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}
