package metacontroller

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// syncDecorator is one sync of an object a DecoratorController decorates:
// its hook answers labels, annotations, status and attachments.
func (r *Reconciler) syncDecorator(ctx context.Context, c *Controller, d Decorated, ns, name string) (reconcile.Result, error) {
	obj, err := r.parentOf(ctx, d.Resource, ns, name)
	if err != nil || obj == nil {
		return reconcile.Result{}, err
	}
	if !d.matches(obj) {
		return reconcile.Result{}, nil // not (or no longer) selected: left alone
	}
	return r.sync(ctx, c, obj, func(ctx context.Context, ep Endpoint, in hookInput) (hookAnswer, error) {
		req := DecoratorSyncRequest{Controller: c.Object, Object: obj, Attachments: in.children, Related: in.related, Finalizing: in.finalizing}
		var resp DecoratorSyncResponse
		err := r.Hooks.CallEndpoint(ctx, ep, req, answerFor(in.hook, &resp))
		return hookAnswer{status: resp.Status, children: resp.Attachments, labels: resp.Labels, annotations: resp.Annotations,
			resyncAfter: resp.ResyncAfterSeconds, finalized: resp.Finalized}, err
	})
}

func (d Decorated) matches(o client.Object) bool {
	return (d.Labels == nil || d.Labels.Matches(labels.Set(o.GetLabels()))) &&
		(d.Annotations == nil || d.Annotations.Matches(labels.Set(o.GetAnnotations())))
}

// patchMeta merges the hook's labels and annotations (null removes one)
// into the object, if that changes anything.
func (r *Reconciler) patchMeta(ctx context.Context, o *unstructured.Unstructured, l, a map[string]*string) error {
	changed := func(cur map[string]string, want map[string]*string) bool {
		for k, v := range want {
			have, ok := cur[k]
			if (v == nil && ok) || (v != nil && (!ok || have != *v)) {
				return true
			}
		}
		return false
	}
	if !changed(o.GetLabels(), l) && !changed(o.GetAnnotations(), a) {
		return nil
	}
	meta := map[string]any{"resourceVersion": o.GetResourceVersion()}
	if len(l) > 0 {
		meta["labels"] = l
	}
	if len(a) > 0 {
		meta["annotations"] = a
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	if err := r.Client.Patch(ctx, o, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting the hook's labels and annotations on %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}
