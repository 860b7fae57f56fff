package serverless

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/genskip"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/telemetry"
)

// routed is where one event goes.
type routed struct {
	keys    []reconcile.Request
	why     string
	objects map[reconcile.Request]*cloudevent.ObjectEvent // stand-ins for primary keys
	// listed: stand-ins for mapped keys, as the map function listed them.
	listed map[reconcile.Request]listedObject
	// delivery is the request's telemetry (observe.go), nil for none.
	delivery *telemetry.Delivery
	// object: routed from an object event (ApiServerSource), which
	// Options.AnswerAdmitted answers at admission.
	object bool
	// forward: its request can forward itself to the holder of the key's
	// Lease (forward.go).
	forward bool
	// keyLease: keys whose own Lease their run takes even while running
	// alone (a sweep found it expired).
	keyLease map[reconcile.Request]bool
}

// listedObject is a primary as a map function's List returned it.
type listedObject struct {
	raw     []byte
	version string
}

func (rt *routed) add(k reconcile.Request) {
	for _, have := range rt.keys {
		if have == k {
			return
		}
	}
	rt.keys = append(rt.keys, k)
}

func (rt *routed) arrival(k reconcile.Request) *arrival {
	a := &arrival{reason: rt.why, forward: rt.forward, keyLease: rt.keyLease[k]}
	if rt.delivery != nil {
		a.obs = rt.delivery.Queued()
	}
	if ev := rt.objects[k]; ev != nil {
		a.object, a.version = ev.Object, ev.Meta.ResourceVersion
	} else if lo, ok := rt.listed[k]; ok {
		a.object, a.version = lo.raw, lo.version
	}
	return a
}

func (e *Engine) route(ctx context.Context, ev any) (*routed, error) {
	switch ev := ev.(type) {
	case *cloudevent.ObjectEvent:
		return e.routeObject(ctx, ev)
	case *cloudevent.Ping:
		return e.routePing(ctx, ev)
	case *cloudevent.Wakeup:
		return e.routeWakeup(ev)
	case *cloudevent.Other:
		return e.routeExternal(ctx, ev)
	}
	return nil, fmt.Errorf("no route for %T", ev)
}

func (e *Engine) kinds() []string {
	out := []string{e.op.Primary.GVK.String()}
	for _, k := range e.op.Owned {
		out = append(out, k.GVK.String())
	}
	for _, w := range e.op.Watched {
		out = append(out, w.GVK.String())
	}
	return out
}

func (e *Engine) routeObject(ctx context.Context, ev *cloudevent.ObjectEvent) (*routed, error) {
	gv, err := schema.ParseGroupVersion(ev.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("apiVersion %q: %w", ev.APIVersion, err)
	}
	gvk := gv.WithKind(ev.Kind)
	if e.cache.Holds(gvk) {
		k := types.NamespacedName{Namespace: ev.Namespace, Name: ev.Name}
		switch {
		case ev.Action == cloudevent.Delete:
			e.cache.Gone(gvk, k)
		case ev.Mode == cloudevent.Resource && !ev.Replay:
			e.cache.Event(gvk, k, ev.Meta.ResourceVersion, ev.Object)
		default:
			e.cache.Event(gvk, k, "", nil)
		}
	}
	rt := &routed{why: fmt.Sprintf("%s %s %s", ev.Kind, ev.Action, key(ev.Namespace, ev.Name)), object: true}
	if ev.Replay {
		rt.why += " (replayed)"
	}
	matched := false
	if gvk == e.op.Primary.GVK {
		matched = true
		if err := e.routePrimary(ev, rt); err != nil {
			return nil, err
		}
	}
	for _, k := range e.op.Owned {
		if gvk == k.GVK {
			matched = true
			if err := e.routeOwned(ctx, ev, k, rt); err != nil {
				return nil, err
			}
		}
	}
	for _, w := range e.op.Watched {
		if gvk == w.GVK {
			matched = true
			if err := e.routeWatched(ctx, ev, w, rt); err != nil {
				return nil, err
			}
		}
	}
	if !matched {
		return nil, fmt.Errorf("kind %s is not watched by operator %s (it watches %s)", gvk, e.op.Name, strings.Join(e.kinds(), ", "))
	}
	return rt, nil
}

func (e *Engine) routePrimary(ev *cloudevent.ObjectEvent, rt *routed) error {
	k := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ev.Namespace, Name: ev.Name}}
	if ev.Action == cloudevent.Delete {
		e.versions.Gone(k.NamespacedName) // no stand-in from before it from now on
	}
	// A replay (a change the sender may have sent before) can carry an
	// object older than what was already reconciled, by this instance or
	// one before it, even from before the object's deletion: it does not
	// enter the order of versions or the skip rule's memory, and it does
	// not stand in for the reconcile's read (the API server answers).
	if ev.Mode == cloudevent.Resource {
		if ev.Action != cloudevent.Delete && !ev.Replay {
			e.versions.Event(k.NamespacedName, ev.Meta.ResourceVersion)
		}
		m := ev.Meta
		if sel := e.op.Primary.Selector; sel != nil && !sel.Matches(labels.Set(m.Labels)) {
			rt.why = "ignored: labels do not match the selector " + sel.String()
			return nil
		}
		if !ev.Replay && e.skip(k, ev) {
			e.stats.Skipped.Add(1)
			e.obs.Skipped()
			rt.why = fmt.Sprintf("skipped: generation %d already observed", m.Generation)
			return nil
		}
	}
	obj, err := e.eventObject(ev, e.op.Primary.GVK)
	if err != nil {
		return err
	}
	if !e.pass(ev, obj) {
		rt.why = "filtered"
		return nil
	}
	if ev.Mode == cloudevent.Resource && ev.Action != cloudevent.Delete && !ev.Replay {
		if rt.objects == nil {
			rt.objects = map[reconcile.Request]*cloudevent.ObjectEvent{}
		}
		rt.objects[k] = ev
	}
	rt.add(k)
	return nil
}

// skip applies the generation-aware rule and remembers the key's metadata.
func (e *Engine) skip(k reconcile.Request, ev *cloudevent.ObjectEvent) bool {
	m := ev.Meta
	e.memoMu.Lock()
	defer e.memoMu.Unlock()
	if ev.Action == cloudevent.Delete {
		e.memo.Forget(k)
		return false
	}
	same := e.memo.Swap(k, genskip.Fingerprint(genskip.Options{OnLabelChange: e.op.Skip.OnLabelChange, OnAnnotationChange: e.op.Skip.OnAnnotationChange}, m.Finalizers, m.Labels, m.Annotations))
	return !e.op.Skip.Disabled && ev.Action == cloudevent.Update && same &&
		genskip.Observed(m.Generation, m.ObservedGeneration, m.HasObserved, m.Deleting)
}

func (e *Engine) routeOwned(ctx context.Context, ev *cloudevent.ObjectEvent, k builder.Kind, rt *routed) error {
	var owner *cloudevent.OwnerRef
	switch {
	case ev.Mode == cloudevent.Resource:
		owner = ev.Meta.Controller
	case ev.Ref != nil: // the hub's Reference mode: the metadata it last saw, a delete's included
		owner = ev.Ref.ControllerRef()
	case ev.Action == cloudevent.Delete:
		rt.why += ": a deleted dependent in Reference mode names no owner (use Resource mode for owned kinds)"
		return nil
	default:
		pom := &metav1.PartialObjectMetadata{}
		pom.SetGroupVersionKind(k.GVK)
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ev.Namespace, Name: ev.Name}, pom); err != nil {
			if apierrors.IsNotFound(err) {
				rt.why += ": gone, no owner to reconcile"
				return nil
			}
			return transient{fmt.Errorf("reading %s %s to find its owner: %w", ev.Kind, key(ev.Namespace, ev.Name), err)}
		}
		if ref := metav1.GetControllerOfNoCopy(pom); ref != nil {
			owner = &cloudevent.OwnerRef{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID)}
		}
	}
	p := e.op.Primary.GVK
	if owner == nil || owner.Kind != p.Kind || groupOf(owner.APIVersion) != p.Group {
		rt.why += ": no controller owner of kind " + p.Kind
		return nil
	}
	obj, err := e.eventObject(ev, k.GVK)
	if err != nil {
		return err
	}
	if e.pass(ev, obj) {
		rt.add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ev.Namespace, Name: owner.Name}})
	}
	return nil
}

func (e *Engine) routeWatched(ctx context.Context, ev *cloudevent.ObjectEvent, w builder.Watch, rt *routed) error {
	obj, err := e.eventObject(ev, w.GVK)
	if err != nil {
		return err
	}
	if !e.pass(ev, obj) {
		return nil
	}
	// What the map function lists of the primary kind stands in for each
	// mapped key's first Get (standin.Listed; e.c is a standin.Client).
	listed := standin.NewListed(e.op.Primary.GVK)
	keys, err := w.Map(listed.With(ctx), e.c, obj)
	if err != nil {
		return transient{fmt.Errorf("mapping %s %s to %s: %w", ev.Kind, key(ev.Namespace, ev.Name), e.op.Primary.GVK.Kind, err)}
	}
	for _, k := range keys {
		rt.add(k)
		if raw, rv := listed.Take(k.NamespacedName); raw != nil { // an event's object, if any, comes first (arrival)
			if rt.listed == nil {
				rt.listed = map[reconcile.Request]listedObject{}
			}
			rt.listed[k] = listedObject{raw, rv}
		}
	}
	return nil
}

// pass applies the operator's filters.
func (e *Engine) pass(ev *cloudevent.ObjectEvent, obj client.Object) bool {
	be := builder.Event{Type: builder.EventType(ev.Action), Object: obj}
	for _, f := range e.op.Filters {
		if !f(be) {
			return false
		}
	}
	return true
}

// eventObject builds the Go object an event is about: its typed form when
// the scheme knows the kind, unstructured otherwise. In Reference mode only
// name and namespace are set, and the metadata the hub sends beside them.
func (e *Engine) eventObject(ev *cloudevent.ObjectEvent, gvk schema.GroupVersionKind) (client.Object, error) {
	var obj client.Object = &unstructured.Unstructured{}
	if ro, err := e.c.Scheme().New(gvk); err == nil {
		if co, ok := ro.(client.Object); ok {
			obj = co
		}
	}
	if ev.Mode == cloudevent.Resource {
		if err := standin.DecodeInto(ev.Object, obj); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", ev.Kind, key(ev.Namespace, ev.Name), err)
		}
	} else {
		obj.SetNamespace(ev.Namespace)
		obj.SetName(ev.Name)
		if r := ev.Ref; r != nil {
			// What the hub last saw of it: owner- and label-mapped handlers
			// find their object, a deleted one's too. No uid: it is still
			// not the whole object (an adopted controller's handlers read
			// that when the uid is empty).
			obj.SetLabels(r.Labels)
			obj.SetAnnotations(r.Annotations)
			refs := make([]metav1.OwnerReference, 0, len(r.OwnerReferences))
			for _, o := range r.OwnerReferences {
				refs = append(refs, metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: types.UID(o.UID),
					Controller: o.Controller, BlockOwnerDeletion: o.BlockOwnerDeletion})
			}
			obj.SetOwnerReferences(refs)
		}
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

// pingData is what a PingSource may carry: one key to reconcile;
// {"sweep":"all"} reconciles every object of the primary kind; empty data
// (or {}) is the anti-entropy sweep: objects whose generation is not
// observed yet, objects being deleted that still carry finalizers, and
// overdue wakeups.
type pingData struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Sweep     string `json:"sweep"`
}

func (e *Engine) routePing(ctx context.Context, p *cloudevent.Ping) (*routed, error) {
	var d pingData
	if len(strings.TrimSpace(string(p.Data))) > 0 {
		if err := json.Unmarshal(p.Data, &d); err != nil {
			return nil, fmt.Errorf("PingSource %s data: want empty, {} or {\"namespace\":..,\"name\":..}: %w", p.Source, err)
		}
	}
	rt := &routed{}
	if d.Name != "" {
		rt.why = "ping for " + key(d.Namespace, d.Name)
		rt.add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Name}})
		return rt, nil
	}
	switch d.Sweep {
	case "all":
		keys, err := e.listPrimary(ctx, false)
		if err != nil {
			return nil, err
		}
		rt.keys, rt.why = keys, fmt.Sprintf("full sweep of %d %s", len(keys), e.op.Primary.GVK.Kind)
		return rt, nil
	case "":
	default:
		return nil, fmt.Errorf("PingSource %s data: sweep %q, want \"all\" or none", p.Source, d.Sweep)
	}
	keys, err := e.listPrimary(ctx, true)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		rt.add(k)
	}
	var overdue, stale int
	if e.opts.Durable != nil {
		if overdue, err = rt.addAll(ctx, "overdue wakeups", e.opts.Durable.Overdue); err != nil {
			return nil, err
		}
	}
	if e.opts.Locker != nil {
		if stale, err = rt.addAll(ctx, "expired leases", func(ctx context.Context) ([]reconcile.Request, error) {
			ks, err := e.opts.Locker.Stale(ctx)
			for _, k := range ks {
				if rt.keyLease == nil {
					rt.keyLease = map[reconcile.Request]bool{}
				}
				rt.keyLease[k] = true
			}
			return ks, err
		}); err != nil {
			return nil, err
		}
	}
	rt.why = fmt.Sprintf("sweep: %d %s need a reconcile, %d overdue wakeups, %d expired leases", len(keys), e.op.Primary.GVK.Kind, overdue, stale)
	return rt, nil
}

// listPrimary lists the keys of the primary objects, paged: every one, or,
// when needing, those whose generation is not observed or that are being
// deleted with finalizers left (that needs the status: full objects, a page
// at a time).
func (e *Engine) listPrimary(ctx context.Context, needing bool) ([]reconcile.Request, error) {
	if needing {
		return e.listNeeding(ctx)
	}
	var keys []reconcile.Request
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(e.op.Primary.GVK.GroupVersion().WithKind(e.op.Primary.GVK.Kind + "List"))
	opts := []client.ListOption{client.Limit(500)}
	if sel := e.op.Primary.Selector; sel != nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	for cont := ""; ; {
		if err := e.c.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return nil, transient{fmt.Errorf("listing %s for a sweep: %w", e.op.Primary.GVK.Kind, err)}
		}
		for _, it := range list.Items {
			keys = append(keys, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: it.Namespace, Name: it.Name}})
		}
		if cont = list.Continue; cont == "" {
			return keys, nil
		}
	}
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

func key(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// transient marks a routing failure that is not the event's fault: the API
// server could not be read. The sender should retry.
type transient struct{ error }

func (t transient) Unwrap() error { return t.error }

func (e *Engine) routeWakeup(w *cloudevent.Wakeup) (*routed, error) {
	gv, err := schema.ParseGroupVersion(w.APIVersion)
	if err != nil || gv.WithKind(w.Kind) != e.op.Primary.GVK || w.Operator != e.op.Name {
		return nil, fmt.Errorf("wakeup for operator %q, %s %s: this is operator %s reconciling %s",
			w.Operator, w.Kind, key(w.Namespace, w.Name), e.op.Name, e.op.Primary.GVK)
	}
	rt := &routed{why: fmt.Sprintf("wakeup (%s) of %s", w.Reason, key(w.Namespace, w.Name))}
	rt.add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
	return rt, nil
}

func (e *Engine) listNeeding(ctx context.Context) ([]reconcile.Request, error) {
	var keys []reconcile.Request
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(e.op.Primary.GVK.GroupVersion().WithKind(e.op.Primary.GVK.Kind + "List"))
	opts := []client.ListOption{client.Limit(500)}
	if sel := e.op.Primary.Selector; sel != nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	for cont := ""; ; {
		if err := e.c.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return nil, transient{fmt.Errorf("listing %s for a sweep: %w", e.op.Primary.GVK.Kind, err)}
		}
		for i := range list.Items {
			it := &list.Items[i]
			observed, has := genskip.ObservedGeneration(it)
			deleting := it.GetDeletionTimestamp() != nil
			if (deleting && len(it.GetFinalizers()) > 0) || !genskip.Observed(it.GetGeneration(), observed, has, deleting) && !deleting {
				keys = append(keys, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: it.GetNamespace(), Name: it.GetName()}})
			}
		}
		if cont = list.GetContinue(); cont == "" {
			return keys, nil
		}
	}
}

// addAll adds the keys list returns (what, for the error) and counts them;
// a failed list is transient: the sender retries the sweep.
func (rt *routed) addAll(ctx context.Context, what string, list func(context.Context) ([]reconcile.Request, error)) (int, error) {
	ks, err := list(ctx)
	if err != nil {
		return 0, transient{fmt.Errorf("listing %s for a sweep: %w", what, err)}
	}
	for _, k := range ks {
		rt.add(k)
	}
	return len(ks), nil
}
