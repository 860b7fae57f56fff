package metacontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// Unsupported is one field of Metacontroller's API that a controller sets
// and opzero does not implement: its path in the object and what opzero
// does instead.
type Unsupported struct {
	Field string
	Why   string
}

func (u Unsupported) String() string { return u.Field + ": " + u.Why }

// The reasons, shared by the fields they explain.
const (
	whyRolling = "not implemented: rolling updates are not built"
	whyStatus  = "not implemented: every change of the object syncs it, a change of its status included"
)

func unsupportedComposite(cc *v1alpha1.CompositeController) []Unsupported {
	var out []Unsupported
	add := func(f, why string) { out = append(out, Unsupported{f, why}) }
	s := cc.Spec
	if s.GenerateSelector != nil && !*s.GenerateSelector {
		add("spec.generateSelector", "false is not implemented: children are found by their controller ownerReference, never by the parent's spec.selector, and orphans are not adopted")
	}
	if s.ParentResource.RevisionHistory != nil {
		add("spec.parentResource.revisionHistory", whyRolling+" (no ControllerRevisions are kept)")
	}
	if b := s.ParentResource.IgnoreStatusChanges; b != nil && *b {
		add("spec.parentResource.ignoreStatusChanges", whyStatus)
	}
	for i, ch := range s.ChildResources {
		p := fmt.Sprintf("spec.childResources[%d].updateStrategy", i)
		if u := ch.UpdateStrategy; u != nil {
			out = append(out, unsupportedMethod(p+".method", u.Method)...)
			if len(u.StatusChecks.Conditions) > 0 {
				add(p+".statusChecks", whyRolling)
			}
		}
	}
	if h := s.Hooks; h != nil {
		for _, x := range []struct {
			name string
			h    *v1alpha1.Hook
		}{{"customize", h.Customize}, {"sync", h.Sync}, {"finalize", h.Finalize}} {
			out = append(out, unsupportedHook("spec.hooks."+x.name, x.h)...)
		}
		if h.PreUpdateChild != nil {
			add("spec.hooks.preUpdateChild", whyRolling+" (the hook is never called)")
		}
		if h.PostUpdateChild != nil {
			add("spec.hooks.postUpdateChild", whyRolling+" (the hook is never called)")
		}
	}
	return out
}

func unsupportedDecorator(dc *v1alpha1.DecoratorController) []Unsupported {
	var out []Unsupported
	s := dc.Spec
	for i, r := range s.Resources {
		if b := r.IgnoreStatusChanges; b != nil && *b {
			out = append(out, Unsupported{fmt.Sprintf("spec.resources[%d].ignoreStatusChanges", i), whyStatus})
		}
	}
	for i, a := range s.Attachments {
		if u := a.UpdateStrategy; u != nil {
			out = append(out, unsupportedMethod(fmt.Sprintf("spec.attachments[%d].updateStrategy.method", i), u.Method)...)
		}
	}
	if h := s.Hooks; h != nil {
		for _, x := range []struct {
			name string
			h    *v1alpha1.Hook
		}{{"customize", h.Customize}, {"sync", h.Sync}, {"finalize", h.Finalize}} {
			out = append(out, unsupportedHook("spec.hooks."+x.name, x.h)...)
		}
	}
	return out
}

func unsupportedMethod(field string, m v1alpha1.ChildUpdateMethod) []Unsupported {
	switch m {
	case v1alpha1.ChildUpdateRollingRecreate:
		return []Unsupported{{field, "RollingRecreate is applied as Recreate, to every child at once (rolling updates are not built)"}}
	case v1alpha1.ChildUpdateRollingInPlace:
		return []Unsupported{{field, "RollingInPlace is applied as InPlace, to every child at once (rolling updates are not built)"}}
	}
	return nil
}

func unsupportedHook(path string, h *v1alpha1.Hook) []Unsupported {
	if h == nil {
		return nil
	}
	var out []Unsupported
	w := h.Webhook
	if w == nil {
		return out
	}
	p := path + ".webhook."
	if w.Etag != nil && w.Etag.Enabled != nil && *w.Etag.Enabled {
		out = append(out, Unsupported{p + "etag", "not implemented: answers are not cached, every sync calls the hook"})
	}
	return out
}

// SupportedCondition is the condition type on a CompositeController or
// DecoratorController that says whether opzero implements every field it
// sets: False (reason UnsupportedFields) names those it does not.
const SupportedCondition = "FieldsSupported"

// UnsupportedFieldReason is the reason of the condition, and of the
// Warning Event sent for each such field.
const UnsupportedFieldReason = "UnsupportedField"

// Warnings are the unsupported fields of every controller, one line each
// ("CompositeController x: spec.y: why"), as `opzero manifests` prints them.
func (cfg *Config) Warnings() []string {
	var out []string
	for _, c := range cfg.Controllers {
		for _, u := range c.Unsupported {
			out = append(out, fmt.Sprintf("%s %s: %s", c.Kind, c.Name, u))
		}
	}
	return out
}

// ReportUnsupported writes the condition FieldsSupported on every
// controller in cfg (as Load read it) and a Warning Event for each
// unsupported field, when the condition differs from the one the object
// has: a restart, or a serverless cold start, with nothing new writes
// nothing.
func ReportUnsupported(ctx context.Context, c client.Client, rec record.EventRecorder, cfg *Config) error {
	var errs []error
	for _, ctl := range cfg.Controllers {
		obj, conds, ok := statusOf(ctl.Object)
		if !ok {
			continue
		}
		want := metav1.Condition{Type: SupportedCondition, Status: metav1.ConditionTrue, Reason: "AllFieldsSupported",
			Message: "opzero implements every field this controller sets", ObservedGeneration: obj.GetGeneration()}
		if len(ctl.Unsupported) > 0 {
			lines := make([]string, len(ctl.Unsupported))
			for i, u := range ctl.Unsupported {
				lines[i] = u.String()
			}
			want.Status, want.Reason = metav1.ConditionFalse, "UnsupportedFields"
			want.Message = "opzero does not implement fields this controller sets: " + strings.Join(lines, "; ")
		}
		if have := meta.FindStatusCondition(*conds, SupportedCondition); have != nil && have.Status == want.Status &&
			have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration {
			continue
		}
		base := obj.DeepCopyObject().(client.Object)
		meta.SetStatusCondition(conds, want)
		if err := c.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
			errs = append(errs, fmt.Errorf("writing the condition %s of %s %s: %w", SupportedCondition, ctl.Kind, ctl.Name, err))
		}
		if rec != nil {
			for _, u := range ctl.Unsupported {
				rec.Event(obj, "Warning", UnsupportedFieldReason, u.String())
			}
		}
	}
	return errors.Join(errs...)
}

// statusOf is a controller object and its conditions.
func statusOf(o any) (client.Object, *[]metav1.Condition, bool) {
	switch x := o.(type) {
	case *v1alpha1.CompositeController:
		return x, &x.Status.Conditions, true
	case *v1alpha1.DecoratorController:
		return x, &x.Status.Conditions, true
	}
	return nil, nil, false
}
