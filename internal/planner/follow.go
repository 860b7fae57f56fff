package planner

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/genskip"
)

func runtimeConvert(m map[string]any, obj client.Object) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, obj)
}

// follow returns the reconciles round's writes would bring, as the
// operator's events would: a write of a primary object that its
// generation-aware skipping would not skip, a write of an owned object
// (its controller owner), a write of a watched object (its map function,
// reading the plan as it stands). Each is planned once per round.
func (p *Planner) follow(ctx context.Context, ops []*builder.Controller, round int, recs []done) []work {
	seen := map[string]bool{}
	var next []work
	add := func(op *builder.Controller, key reconcile.Request, why string) {
		id := op.Name + "\x00" + key.String()
		if !seen[id] {
			seen[id] = true
			next = append(next, work{op: op, key: key, why: why})
		}
	}
	for _, d := range recs {
		for _, w := range d.wr {
			why := fmt.Sprintf("%s %s %s in round %d", w.gvk.Kind, w.key, pastTense(w.verb, w.sub), round)
			for _, op := range ops {
				for _, key := range p.wakes(ctx, op, w) {
					add(op, key, why)
				}
			}
		}
	}
	sortWork(next)
	return next
}

// wakes returns the keys of op a write w would have reconciled.
func (p *Planner) wakes(ctx context.Context, op *builder.Controller, w written) []reconcile.Request {
	gk := w.gvk.GroupKind()
	var out []reconcile.Request
	if gk == op.Primary.GVK.GroupKind() && p.primaryWakes(op, w) {
		out = append(out, reconcile.Request{NamespacedName: w.key})
	}
	for _, k := range op.Owned {
		if gk != k.GVK.GroupKind() {
			continue
		}
		if owner, ok := controllerOf(op.Primary.GVK, w.after, w.before); ok {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.key.Namespace, Name: owner}})
		}
	}
	for _, wt := range op.Watched {
		if gk != wt.GVK.GroupKind() || wt.Map == nil {
			continue
		}
		obj := &unstructured.Unstructured{Object: firstNonNil(w.after, w.before)}
		obj.SetGroupVersionKind(w.gvk)
		if typed, err := p.opts.Client.Scheme().New(w.gvk); err == nil {
			if co, ok := typed.(client.Object); ok && runtimeConvert(obj.Object, co) == nil {
				keys, err := wt.Map(ctx, p.opts.Client, co)
				if err == nil {
					out = append(out, keys...)
				}
				continue
			}
		}
		if keys, err := wt.Map(ctx, p.opts.Client, obj); err == nil {
			out = append(out, keys...)
		}
	}
	return out
}

// primaryWakes reports whether a write of a primary object would bring
// its reconcile, as the engines route its update event: a create or a
// delete, or an update that generation-aware skipping lets through (its
// generation not observed, its finalizers changed, being deleted, labels
// or annotations changed when the controller asks for them; every update
// with skipping disabled).
func (p *Planner) primaryWakes(op *builder.Controller, w written) bool {
	if op.Skip.Disabled || w.sub == "" && (w.verb == "create" || w.verb == "delete") {
		return true
	}
	if w.after == nil {
		return false
	}
	a := &unstructured.Unstructured{Object: w.after}
	b := &unstructured.Unstructured{Object: w.before}
	if w.before == nil {
		b = &unstructured.Unstructured{Object: map[string]any{}}
	}
	o := genskip.Options{OnLabelChange: op.Skip.OnLabelChange, OnAnnotationChange: op.Skip.OnAnnotationChange}
	if genskip.FingerprintOf(o, a) != genskip.FingerprintOf(o, b) {
		return true
	}
	observed, has := int64At(w.after, "status", "observedGeneration")
	generation, _ := int64At(w.after, "metadata", "generation")
	return !genskip.Observed(generation, observed, has, a.GetDeletionTimestamp() != nil)
}

// int64At reads an integer of a JSON object as encoding/json decodes it
// (a float64), or as apimachinery does (an int64).
func int64At(m map[string]any, path ...string) (int64, bool) {
	v, ok, _ := unstructured.NestedFieldNoCopy(m, path...)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case float64:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

// controllerOf is the name of the controller owner of kind primary.
func controllerOf(primary schema.GroupVersionKind, objs ...map[string]any) (string, bool) {
	for _, m := range objs {
		if m == nil {
			continue
		}
		u := unstructured.Unstructured{Object: m}
		for _, r := range u.GetOwnerReferences() {
			if r.Controller == nil || !*r.Controller || r.Kind != primary.Kind {
				continue
			}
			gv, err := schema.ParseGroupVersion(r.APIVersion)
			if err == nil && gv.Group == primary.Group {
				return r.Name, true
			}
		}
	}
	return "", false
}

func firstNonNil(ms ...map[string]any) map[string]any {
	for _, m := range ms {
		if m != nil {
			return m
		}
	}
	return map[string]any{}
}

func pastTense(verb, sub string) string {
	s := map[string]string{"create": "created", "update": "updated", "patch": "patched", "delete": "deleted"}[verb]
	if s == "" {
		s = verb
	}
	if sub != "" {
		s += " (" + sub + ")"
	}
	return "would be " + s
}
