package planner

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/plan"
)

// mapWatched lists every object of op's watched kinds (metadata only, as
// Reference mode delivers them; in req's namespace) and returns the keys
// their map functions give that are not in listed, once each.
func (p *Planner) mapWatched(ctx context.Context, op *builder.Controller, req plan.Request, listed []reconcile.Request) ([]work, error) {
	seen := map[reconcile.Request]bool{}
	for _, k := range listed {
		seen[k] = true
	}
	var out []work
	for _, w := range op.Watched {
		if w.Map == nil {
			continue
		}
		objs, err := p.listMeta(ctx, w.GVK, req.Namespace)
		if err != nil {
			return out, err
		}
		for _, obj := range objs {
			keys, err := w.Map(ctx, p.opts.Client, obj)
			if err != nil {
				return out, fmt.Errorf("mapping %s %s: %w", w.GVK.Kind, client.ObjectKeyFromObject(obj), err)
			}
			for _, k := range keys {
				if seen[k] || req.Namespace != "" && k.Namespace != req.Namespace {
					continue
				}
				seen[k] = true
				out = append(out, work{op: op, key: k, why: fmt.Sprintf("mapped from %s %s", w.GVK.Kind, client.ObjectKeyFromObject(obj))})
			}
		}
	}
	sortWork(out)
	return out, nil
}

// listMeta lists the objects of kind gvk in ns ("": all), paged, as Go
// objects of the scheme's type for gvk (unstructured when it has none)
// carrying their metadata only.
func (p *Planner) listMeta(ctx context.Context, gvk schema.GroupVersionKind, ns string) ([]client.Object, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.Limit(500)}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	var out []client.Object
	for cont := ""; ; {
		if err := p.opts.Plan.raw.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return out, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			raw, _ := json.Marshal(&list.Items[i])
			var obj client.Object = &unstructured.Unstructured{}
			if typed, err := p.opts.Client.Scheme().New(gvk); err == nil {
				if co, ok := typed.(client.Object); ok {
					obj = co
				}
			}
			if err := decode(raw, obj, gvk); err != nil {
				return out, err
			}
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			out = append(out, obj)
		}
		if cont = list.Continue; cont == "" {
			return out, nil
		}
	}
}
