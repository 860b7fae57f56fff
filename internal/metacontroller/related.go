package metacontroller

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CustomizeRequest is what a customize hook receives.
type CustomizeRequest struct {
	Controller any                        `json:"controller"`
	Parent     *unstructured.Unstructured `json:"parent"`
}

// CustomizeResponse is what it answers: the related objects of the parent.
type CustomizeResponse struct {
	RelatedResources []RelatedRule `json:"relatedResources"`
}

// RelatedRule selects related objects of one resource: by labelSelector,
// or by names (all objects when neither is set), in namespace.
type RelatedRule struct {
	APIVersion    string                `json:"apiVersion"`
	Resource      string                `json:"resource"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	Namespace     string                `json:"namespace,omitempty"`
	Names         []string              `json:"names,omitempty"`
}

// related calls the controller's customize hook for parent and reads the
// objects it names from the API server (no cache). No customize hook: an
// empty map. An answer that cannot be used is a *BadAnswer.
func (r *Reconciler) related(ctx context.Context, c *Controller, parent *unstructured.Unstructured) (ChildMap, error) {
	out := ChildMap{}
	if c.Customize == nil {
		return out, nil
	}
	url, timeout, err := r.hookURL(ctx, c.Customize.Webhook)
	if err != nil {
		return nil, err
	}
	var resp CustomizeResponse
	if err := r.Hooks.Call(ctx, url, timeout, CustomizeRequest{Controller: c.Object, Parent: parent}, &resp); err != nil {
		return nil, err
	}
	for i, rule := range resp.RelatedResources {
		if err := r.fetchRelated(ctx, parent, rule, out); err != nil {
			if bad, ok := err.(badRule); ok {
				return nil, &BadAnswer{URL: url, Reason: fmt.Sprintf("relatedResources[%d]: %s", i, string(bad))}
			}
			return nil, readError{fmt.Errorf("reading relatedResources[%d] (%s %s) of %s %s: %w", i, rule.APIVersion, rule.Resource, parent.GetKind(), parent.GetName(), err)}
		}
	}
	return out, nil
}

// readError is a failure to read related objects (the API server's, not
// the hook's): the sync is retried, the parent is not marked.
type readError struct{ error }

func (e readError) Unwrap() error { return e.error }

// relatedFor is related, with the hook's failures reported on the parent.
func (r *Reconciler) relatedFor(ctx context.Context, c *Controller, parent *unstructured.Unstructured) (ChildMap, error) {
	m, err := r.related(ctx, c, parent)
	if err == nil {
		return m, nil
	}
	if _, ok := err.(readError); ok {
		return nil, err
	}
	return nil, r.hookFailed(ctx, c, parent, fmt.Errorf("customize hook: %w", err))
}

// badRule is a rule the hook should not have answered.
type badRule string

func (b badRule) Error() string { return string(b) }

// fetchRelated adds the objects rule selects to out, keyed as children
// are: "Kind.apiVersion" -> name, "<namespace>/<name>" outside the parent's
// namespace.
func (r *Reconciler) fetchRelated(ctx context.Context, parent *unstructured.Unstructured, rule RelatedRule, out ChildMap) error {
	gv, err := schema.ParseGroupVersion(rule.APIVersion)
	if err != nil || rule.APIVersion == "" || rule.Resource == "" {
		return badRule(fmt.Sprintf("apiVersion %q, resource %q: want e.g. v1 and configmaps", rule.APIVersion, rule.Resource))
	}
	if rule.LabelSelector != nil && len(rule.Names) > 0 {
		return badRule("labelSelector and names are both set; Metacontroller allows one or the other")
	}
	mapper := r.Client.RESTMapper()
	gvk, err := mapper.KindFor(gv.WithResource(rule.Resource))
	if err != nil {
		if meta.IsNoMatchError(err) {
			return badRule(fmt.Sprintf("the API server serves no resource %s in %s", rule.Resource, rule.APIVersion))
		}
		return err
	}
	namespaced, err := r.Client.IsObjectNamespaced(objectOf(gvk))
	if err != nil {
		return err
	}
	ns := rule.Namespace
	switch {
	case !namespaced:
		if ns != "" {
			return badRule(fmt.Sprintf("namespace %q is set but %s is cluster-scoped", ns, rule.Resource))
		}
	case parent.GetNamespace() != "":
		if ns != "" && ns != parent.GetNamespace() {
			return badRule(fmt.Sprintf("namespace %q: the parent is in namespace %s, and related objects of a namespaced parent come from its namespace", ns, parent.GetNamespace()))
		}
		ns = parent.GetNamespace()
	}
	m := out[ChildKey(gvk.GroupVersion().String(), gvk.Kind)]
	if m == nil {
		m = map[string]*unstructured.Unstructured{}
		out[ChildKey(gvk.GroupVersion().String(), gvk.Kind)] = m
	}
	add := func(o *unstructured.Unstructured) {
		o.SetGroupVersionKind(gvk)
		n := o.GetName()
		if o.GetNamespace() != parent.GetNamespace() && o.GetNamespace() != "" {
			n = o.GetNamespace() + "/" + n
		}
		m[n] = o
	}
	if len(rule.Names) > 0 {
		if namespaced && ns == "" {
			return badRule("names are set without a namespace; a cluster-scoped parent must name the namespace of namespaced related objects")
		}
		names := append([]string(nil), rule.Names...)
		sort.Strings(names)
		for _, name := range names {
			o := objectOf(gvk)
			err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o)
			if apierrors.IsNotFound(err) {
				continue // not (yet) there: the hook sees it missing
			}
			if err != nil {
				return err
			}
			add(o)
		}
		return nil
	}
	sel := labels.Everything()
	if rule.LabelSelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(rule.LabelSelector); err != nil {
			return badRule("labelSelector: " + err.Error())
		}
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}}
	if namespaced && ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	for i := range list.Items {
		add(&list.Items[i])
	}
	return nil
}

func objectOf(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}
