// Package classic runs an operator (builder.Controller) on a controller-runtime
// manager: informers, a workqueue, leader election. It is the always-on
// counterpart of package serverless, with the same description, the same
// generation-aware skipping and the same automatic observedGeneration.
// External events (builder.WatchesEvents) arrive on an HTTP endpoint
// beside the manager (events.go), routed by the serverless engine's code
// (package eventroute) into the controller's workqueue.
package classic

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/genskip"
	"github.com/opzero/opzero/internal/standin"
)

// Options tunes the controller.
type Options struct {
	MaxConcurrentReconciles int
	// Events configures the endpoint for the operator's external events
	// (builder.WatchesEvents); unused when it declares none.
	Events EventsOptions
}

// Setup registers op with mgr. The reconciler should use a client wrapped by
// standin.NewClient (the runtime does this) for automatic observedGeneration.
func Setup(mgr manager.Manager, op *builder.Controller, opts Options) error {
	b := ctrlbuilder.ControllerManagedBy(mgr).
		Named(op.Name).
		For(op.Primary.Object, ctrlbuilder.WithPredicates(primaryPredicates(op)...)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles})
	filters := func(k builder.Kind) ctrlbuilder.Predicates {
		return ctrlbuilder.WithPredicates(append([]predicate.Predicate{filterPredicate(op.Filters)}, updatedWhen(k)...)...)
	}
	for _, k := range op.Owned {
		b = b.Owns(k.Object, filters(k))
	}
	for _, w := range op.Watched {
		w := w
		c := mgr.GetClient()
		b = b.Watches(w.Object, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
			keys, err := w.Map(ctx, c, obj)
			if err != nil { // controller-runtime's map functions cannot fail: the cache rarely does
				log.FromContext(ctx).Error(err, "mapping a watched object", "kind", w.GVK.Kind, "object", client.ObjectKeyFromObject(obj))
			}
			return keys
		}), filters(w.Kind))
	}
	if len(op.Events) > 0 && opts.Events.Addr != "0" {
		// External events: an HTTP endpoint beside the manager routes them
		// (package eventroute, as in serverless mode) into this
		// controller's queue, which a raw source hands over when it starts.
		ev := &events{op: op, c: mgr.GetClient()}
		b = b.WatchesRawSource(source.Func(ev.setQueue))
		o := opts.Events
		if o.Addr == "" {
			o.Addr = DefaultEventsAddr
		}
		if err := mgr.Add(serve{h: ev, o: o}); err != nil {
			return fmt.Errorf("adding the Broker events endpoint of %s: %w", op.Name, err)
		}
	}
	if err := b.Complete(&reconciler{op: op, c: mgr.GetClient()}); err != nil {
		return fmt.Errorf("setting up controller %s: %w", op.Name, err)
	}
	return nil
}

// reconciler wraps the user's to carry per-reconcile state and write
// observedGeneration after a success.
type reconciler struct {
	op *builder.Controller
	c  client.Client
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	st := standin.New(r.op.Primary.GVK, req.NamespacedName, nil, nil)
	res, err := r.op.Reconciler.Reconcile(standin.With(ctx, st), req)
	if err == nil && r.op.AutoObservedGeneration {
		// As in serverless mode: retried on conflict, and a failure fails
		// the reconcile (controller-runtime retries it with backoff).
		if perr := standin.WriteObservedGeneration(ctx, r.c, r.op.Primary.GVK, req.NamespacedName, st.Generation()); perr != nil {
			return res, fmt.Errorf("writing status.observedGeneration of %s: %w", req, perr)
		}
	}
	return res, err
}

func primaryPredicates(op *builder.Controller) []predicate.Predicate {
	ps := []predicate.Predicate{filterPredicate(op.Filters)}
	if sel := op.Primary.Selector; sel != nil {
		ps = append(ps, predicate.NewPredicateFuncs(func(o client.Object) bool { return sel.Matches(labels.Set(o.GetLabels())) }))
	}
	if !op.Skip.Disabled {
		ps = append(ps, skipPredicate(op.Skip))
	}
	return append(ps, updatedWhen(op.Primary)...)
}

// updatedWhen is builder.UpdatedWhen as controller-runtime's predicates
// (none when the kind lets every update through).
func updatedWhen(k builder.Kind) []predicate.Predicate {
	var any []predicate.Predicate
	for _, c := range k.UpdatedWhen {
		switch c {
		case builder.GenerationChanged:
			any = append(any, predicate.GenerationChangedPredicate{})
		case builder.LabelsChanged:
			any = append(any, predicate.LabelChangedPredicate{})
		case builder.AnnotationsChanged:
			any = append(any, predicate.AnnotationChangedPredicate{})
		}
	}
	if len(any) == 0 {
		return nil
	}
	return []predicate.Predicate{predicate.Or(any...)}
}

// skipPredicate drops updates that the generation-aware rule skips; here the
// old object is at hand, so the metadata comparison needs no memo.
func skipPredicate(o builder.SkipOptions) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return true
		}
		n := e.ObjectNew
		observed, has := genskip.ObservedGeneration(n)
		fo := genskip.Options{OnLabelChange: o.OnLabelChange, OnAnnotationChange: o.OnAnnotationChange}
		skip := genskip.Observed(n.GetGeneration(), observed, has, n.GetDeletionTimestamp() != nil) &&
			genskip.FingerprintOf(fo, e.ObjectOld) == genskip.FingerprintOf(fo, n)
		return !skip
	}}
}

// filterPredicate applies opzero filters to controller-runtime events.
func filterPredicate(fs []builder.Filter) predicate.Predicate {
	pass := func(t builder.EventType, o client.Object) bool {
		for _, f := range fs {
			if !f(builder.Event{Type: t, Object: o}) {
				return false
			}
		}
		return true
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return pass(builder.Added, e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return pass(builder.Updated, e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return pass(builder.Deleted, e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return pass(builder.Updated, e.Object) },
	}
}
