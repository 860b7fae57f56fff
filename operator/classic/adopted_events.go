package classic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/adopt"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/operator/internal/seam"
)

// How an adopted controller's events reach it serverless: the
// builder.Controller it is described as, the filter that runs each event
// through the controller's own handlers and predicates, and the requests
// they make for other keys, reconciled later as in-process pings.

// controller describes the adopted controller: For's kind is the primary,
// every other kind is watched, and every event goes through the
// controller's own handlers and predicates (filter); generation-aware
// skipping is off, since the predicates decide. Described for `opzero
// manifests`, the kinds of the builder's Owns are owned instead, so that
// their source delivers whole objects (Resource mode, owner filter) and a
// deleted dependent still names its owner.
func (m *adopted) controller(a *adopt.Controller, foreign []adopt.ForeignSource) (*builder.Controller, error) {
	gk, ok := a.PrimaryKind()
	if !ok {
		// Built without For: the kind whose own handler maps an object to
		// itself (Watches(&Kind{}, &handler.EnqueueRequestForObject{})).
		gk, ok = a.SelfMappedKind()
	}
	if !ok {
		return nil, fmt.Errorf("controller %s: serverless needs the kind it reconciles, and no watched kind maps an object to its own key; "+
			"build it with ctrl.NewControllerManagedBy(mgr).For(...) or Watches(&Kind{}, &handler.EnqueueRequestForObject{})", a.Name())
	}
	var primary *adopt.Informer
	c := a.Cache()
	for _, inf := range c.Informers() {
		if inf.GVK().GroupKind() == gk {
			primary = inf
		}
	}
	if primary == nil {
		return nil, fmt.Errorf("controller %s: no source watches its For kind %s", a.Name(), gk)
	}
	b := builder.New(m.GetScheme()).Named(a.Name()).For(primary.Prototype()).WithSkipOptions(builder.SkipOptions{Disabled: true})
	for _, inf := range c.Informers() {
		switch {
		case inf == primary:
		case m.describing && c.Owned(inf.GVK()):
			b.Owns(inf.Prototype())
		default:
			b.Watches(inf.Prototype(), m.mapStashed)
		}
	}
	b.WithEventFilter(m.filter(a, primary.GVK()))
	var r reconcile.Reconciler = reconcile.Func(a.Reconcile)
	if m.describing && a.Do() != nil {
		r = a.Do() // its package holds the +kubebuilder:rbac markers
	}
	op, err := b.Build(r)
	if err != nil {
		return nil, err
	}
	if m.describing {
		everywhere(op, primary.GVK().GroupKind(), foreign)
		for _, gvk := range foreignKinds(foreign) {
			op.Notes = append(op.Notes, fmt.Sprintf("controller %s: its source of %s on a cache the project built (cache.New) is served as the manager cache's are, through the hub or an ApiServerSource: "+
				"nothing waits for that cache to sync, and its own options are not read (the hub filters %s in every namespace)", a.Name(), gvk.Kind, gvk.Kind))
		}
	}
	for _, s := range a.RawSources() {
		if s.Fed() {
			op.Warnings = append(op.Warnings, fmt.Sprintf("controller %s: its %s watches no kind: what it sends is reconciled only while an instance runs, "+
				"and nothing sends it at zero (for external events, builder.WatchesEvents takes them through the Broker; or run --mode=classic)", a.Name(), s.Name))
			continue
		}
		op.Unserved = append(op.Unserved, builder.Source{Name: s.Name, File: s.File, Line: s.Line})
	}
	updatedWhen(c, &op.Primary)
	for i := range op.Owned {
		updatedWhen(c, &op.Owned[i])
	}
	for i := range op.Watched {
		updatedWhen(c, &op.Watched[i].Kind)
	}
	return op, nil
}

// foreignKinds are the kinds of fs, each once, in order.
func foreignKinds(fs []adopt.ForeignSource) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, f := range fs {
		if !slices.Contains(out, f.GVK) {
			out = append(out, f.GVK)
		}
	}
	return out
}

// everywhere describes the kinds the controller watches through a cache
// the project built (foreign): that cache holds them in every namespace,
// whatever the manager cache's options say of the same kind. A kind whose
// every such source maps to its controller (or any) owner of the primary
// kind through EnqueueRequestForOwner is owned there: the hub sends only
// objects with such an owner. A kind also watched through the manager's
// cache keeps that use too, in the manager cache's scope: the hub sends
// what either use would (a project's sources in one namespace, its
// targets everywhere).
func everywhere(op *builder.Controller, pk schema.GroupKind, foreign []adopt.ForeignSource) {
	byKind := map[schema.GroupVersionKind][]adopt.ForeignSource{}
	for _, f := range foreign {
		byKind[f.GVK] = append(byKind[f.GVK], f)
	}
	for gvk, fs := range byKind {
		if gvk.GroupKind() == pk {
			continue // the primary is watched as the manager's cache holds it
		}
		ownedOnly := true
		for _, f := range fs {
			ownedOnly = ownedOnly && f.Owner != nil && *f.Owner == pk && f.OnlyController // the hub's owner filter is the controller owner's
		}
		i := slices.IndexFunc(op.Watched, func(w builder.Watch) bool { return w.GVK == gvk })
		j := slices.IndexFunc(op.Owned, func(k builder.Kind) bool { return k.GVK == gvk })
		switch {
		case j >= 0:
			// Owns(...) on the manager's cache too: owned either way.
			op.Owned[j].Everywhere = true
		case i < 0:
		case !ownedOnly:
			op.Watched[i].Everywhere = true
		default:
			k := op.Watched[i].Kind
			k.Everywhere = true
			op.Owned = append(op.Owned, k)
			if !fs[0].Shared {
				op.Watched = slices.Delete(op.Watched, i, i+1)
			}
		}
	}
}

// updatedWhen describes k's update filter from the predicates of the
// controller's sources of the kind (adopt.Informer.UpdatedWhen): what the
// hub may drop before waking the operator, and what it cannot apply.
func updatedWhen(c *adopt.Cache, k *builder.Kind) {
	inf, ok := c.Lookup(k.GVK)
	if !ok {
		return
	}
	parts, untranslated := inf.UpdatedWhen()
	for _, p := range parts {
		k.UpdatedWhen = append(k.UpdatedWhen, builder.Change(p))
	}
	for _, u := range untranslated {
		k.Unfiltered = append(k.Unfiltered, "predicate "+strings.ReplaceAll(u, adopt.KindPlaceholder, k.GVK.Kind))
	}
	if k.Everywhere {
		return // watched through a cache of the project's own, whose handlers c does not hold
	}
	if sources, ok := inf.TypeFilters(); ok {
		for _, src := range sources {
			sites := []builder.FuncSite{}
			for _, s := range src {
				sites = append(sites, builder.FuncSite{Type: s.Type, File: s.File, Line: s.Line})
			}
			k.TypeFilters = append(k.TypeFilters, sites)
		}
	}
}

// filter runs each event through the controller's handlers. For the
// primary kind the engine routes to the object's own key: the filter keeps
// the event if the handlers asked for it, and sends any other key they
// asked for on by itself (later). For the other kinds it stashes the
// requests for mapStashed, which the engine calls next with the same
// object.
func (m *adopted) filter(a *adopt.Controller, primary schema.GroupVersionKind) builder.Filter {
	return func(ev builder.Event) bool {
		gvk := ev.Object.GetObjectKind().GroupVersionKind()
		reqs := a.Deliver(gvk, adopt.EventType(ev.Type), m.whole(ev))
		if gvk != primary {
			if len(reqs) == 0 {
				return false
			}
			m.stash.Store(ev.Object, reqs)
			return true
		}
		own := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ev.Object.GetNamespace(), Name: ev.Object.GetName()}}
		keep := false
		for _, r := range reqs {
			if r == own {
				keep = true
			} else {
				m.later(a.Name(), r, 0)
			}
		}
		return keep
	}
}

func (m *adopted) mapStashed(_ context.Context, _ client.Reader, obj client.Object) ([]reconcile.Request, error) {
	v, _ := m.stash.LoadAndDelete(obj)
	reqs, _ := v.([]reconcile.Request)
	return reqs, nil
}

// whole returns the event's object; a Reference-mode event carries only a
// name, and the handlers expect the object: it is read from the API server
// (a deleted one stays a name).
func (m *adopted) whole(ev builder.Event) client.Object {
	obj := ev.Object
	if obj.GetUID() != "" || ev.Type == builder.Deleted || m.GetClient() == nil {
		return obj
	}
	full, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return obj
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.GetClient().Get(ctx, client.ObjectKeyFromObject(obj), full); err != nil {
		m.log.V(1).Info("reading the object of a Reference-mode event for the controller's handlers; they get its name only", "object", client.ObjectKeyFromObject(obj), "error", err.Error())
		return obj
	}
	full.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return full
}

// later submits a request the handlers made for a key the event was not
// routed to (or one added outside an event) as an in-process ping for that
// key: it is reconciled like any other, but the event's answer does not
// wait for it. It goes to the engine of the controller whose handlers made
// it. Requests made before that engine exists (a source that emits while
// the controller starts) wait for it.
func (m *adopted) later(controller string, r reconcile.Request, after time.Duration) {
	m.mu.Lock()
	e := seam.Engine(m.Runtime, controller) // set by operator's init (operator/runtime.go)
	if e == nil {
		m.pending = append(m.pending, pendingRequest{controller, r})
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	time.AfterFunc(max(after, 0), func() {
		data, _ := json.Marshal(map[string]string{"namespace": r.Namespace, "name": r.Name})
		req, err := cloudevent.NewRequest(context.Background(), "http://in-process/", cloudevent.NewPing("opzero/adopted-controller", data), false)
		if err != nil {
			return
		}
		e.ServeHTTP(discard{}, req)
	})
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
