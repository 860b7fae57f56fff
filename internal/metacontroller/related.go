package metacontroller

import (
	"context"
	"fmt"
	"slices"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
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
// v2 is the version of the sync hook that gets them (how they are named).
func (r *Reconciler) related(ctx context.Context, c *Controller, parent *unstructured.Unstructured, v2 bool) (ChildMap, error) {
	out := ChildMap{}
	if c.Customize == nil {
		return out, nil
	}
	ep, err := r.endpoint(ctx, c, c.Customize.Webhook)
	if err != nil {
		return nil, err
	}
	url := ep.URL
	var resp CustomizeResponse
	if err := r.Hooks.CallEndpoint(ctx, ep, CustomizeRequest{Controller: c.Object, Parent: parent}, answerFor(c.Customize, &resp)); err != nil {
		return nil, err
	}
	sels := make([]selection, 0, len(resp.RelatedResources))
	for i, rule := range resp.RelatedResources {
		res, sel, err := r.resolveRule(parent, rule, isV2(c.Customize))
		if err == nil && !c.watchesRelated(res.GVK) {
			if lerr := r.learn(ctx, c, res); lerr != nil { // the sync goes on: this parent is served, its related changes not yet watched
				log.FromContext(ctx).Error(lerr, "learning a related resource")
			}
		}
		if err == nil {
			sels = append(sels, sel)
			err = r.fetchRelated(ctx, parent, res, sel, out, v2)
		}
		if err != nil {
			if bad, ok := err.(badRule); ok {
				return nil, &BadAnswer{URL: url, Reason: fmt.Sprintf("relatedResources[%d]: %s", i, string(bad))}
			}
			return nil, readError{fmt.Errorf("reading relatedResources[%d] (%s %s) of %s %s: %w", i, rule.APIVersion, rule.Resource, parent.GetKind(), parent.GetName(), err)}
		}
	}
	r.Config.answers.put(answerKey(c, parent.GetNamespace(), parent.GetName()), sels)
	return out, nil
}

// readError is a failure to read related objects (the API server's, not
// the hook's): the sync is retried, the parent is not marked.
type readError struct{ error }

func (e readError) Unwrap() error { return e.error }

// relatedFor is related, with the hook's failures reported on the parent.
func (r *Reconciler) relatedFor(ctx context.Context, c *Controller, parent *unstructured.Unstructured, v2 bool) (ChildMap, error) {
	m, err := r.related(ctx, c, parent, v2)
	if err == nil {
		return m, nil
	}
	if _, ok := err.(readError); ok {
		return nil, r.relatedUnreadable(ctx, c, parent, err)
	}
	return nil, r.hookFailed(ctx, c, parent, fmt.Errorf("customize hook: %w", err))
}

// relatedUnreadable reports on the parent that what its customize hook
// named could not be read (Forbidden: the operator's RBAC; or the API
// server failed): the condition Synced=False RelatedUnreadable, named by
// the SyncError Event. The sync is retried with backoff.
func (r *Reconciler) relatedUnreadable(ctx context.Context, c *Controller, parent *unstructured.Unstructured, err error) error {
	msg := fmt.Sprintf("%s %s: %v", c.Kind, c.Name, err)
	if apierrors.IsForbidden(err) {
		msg += "; the operator's service account may not read it: grant it get, list and watch on that resource " +
			"(opzero manifests grants them on every resource to a controller with a customize hook, unless its annotation " + RelatedAnnotation + " narrows them)"
	}
	return r.failed(ctx, parent, ReasonRelatedUnreadable, msg, err)
}

// badRule is a rule the hook should not have answered.
type badRule string

func (b badRule) Error() string { return string(b) }

// resolveRule checks a rule and resolves what it selects: a namespaced
// parent's related objects come from its namespace (v1) or, for a v2
// customize hook, as a cluster-scoped parent's: from the rule's namespace,
// or every namespace.
func (r *Reconciler) resolveRule(parent *unstructured.Unstructured, rule RelatedRule, v2 bool) (Resource, selection, error) {
	gv, err := schema.ParseGroupVersion(rule.APIVersion)
	if err != nil || rule.APIVersion == "" || rule.Resource == "" {
		return Resource{}, selection{}, badRule(fmt.Sprintf("apiVersion %q, resource %q: want e.g. v1 and configmaps", rule.APIVersion, rule.Resource))
	}
	if ls := rule.LabelSelector; ls != nil && len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0 && len(rule.Names) > 0 {
		rule.LabelSelector = nil // "labelSelector: {}" beside names, as Metacontroller's own examples answer: the names select
	}
	if rule.LabelSelector != nil && len(rule.Names) > 0 {
		return Resource{}, selection{}, badRule("labelSelector and names are both set; Metacontroller allows one or the other")
	}
	mapper := r.Client.RESTMapper()
	gvr := gv.WithResource(rule.Resource)
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return Resource{}, selection{}, badRule(fmt.Sprintf("the API server serves no resource %s in %s", rule.Resource, rule.APIVersion))
		}
		return Resource{}, selection{}, err
	}
	namespaced, err := r.Client.IsObjectNamespaced(objectOf(gvk))
	if err != nil {
		return Resource{}, selection{}, err
	}
	res := Resource{GVR: gvr, GVK: gvk, Namespaced: namespaced}
	sel := selection{gk: gvk.GroupKind(), namespace: rule.Namespace, names: append([]string(nil), rule.Names...)}
	switch {
	case !namespaced:
		if rule.Namespace != "" {
			return res, sel, badRule(fmt.Sprintf("namespace %q is set but %s is cluster-scoped", rule.Namespace, rule.Resource))
		}
	case parent.GetNamespace() != "" && !v2:
		if rule.Namespace != "" && rule.Namespace != parent.GetNamespace() {
			return res, sel, badRule(fmt.Sprintf("namespace %q: the parent is in namespace %s, and related objects of a namespaced parent come from its namespace", rule.Namespace, parent.GetNamespace()))
		}
		sel.namespace = parent.GetNamespace()
	}
	if len(sel.names) > 0 {
		if namespaced && sel.namespace == "" && !v2 {
			return res, sel, badRule("names are set without a namespace; a cluster-scoped parent must name the namespace of namespaced related objects")
		}
		sort.Strings(sel.names)
		return res, sel, nil
	}
	sel.sel = labels.Everything()
	if rule.LabelSelector != nil {
		if sel.sel, err = metav1.LabelSelectorAsSelector(rule.LabelSelector); err != nil {
			return res, sel, badRule("labelSelector: " + err.Error())
		}
	}
	return res, sel, nil
}

// fetchRelated adds the objects sel selects to out, keyed as children
// are: "Kind.apiVersion" -> objectName.
func (r *Reconciler) fetchRelated(ctx context.Context, parent *unstructured.Unstructured, res Resource, sel selection, out ChildMap, v2 bool) error {
	gvk := res.GVK
	key := ChildKey(gvk.GroupVersion().String(), gvk.Kind)
	m := out[key]
	if m == nil {
		m = map[string]*unstructured.Unstructured{}
		out[key] = m
	}
	add := func(o *unstructured.Unstructured) {
		o.SetGroupVersionKind(gvk)
		m[objectName(o, parent.GetNamespace(), v2)] = o
	}
	everywhere := res.Namespaced && sel.namespace == "" // names in every namespace (v2)
	for _, name := range sel.names {
		if everywhere {
			break
		}
		o := objectOf(gvk)
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: sel.namespace, Name: name}, o)
		if apierrors.IsNotFound(err) {
			continue // not (yet) there: the hook sees it missing
		}
		if err != nil {
			return err
		}
		add(o)
	}
	if len(sel.names) > 0 && !everywhere {
		return nil
	}
	if sel.sel == nil {
		sel.sel = labels.Everything()
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel.sel}}
	if res.Namespaced && sel.namespace != "" {
		opts = append(opts, client.InNamespace(sel.namespace))
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	for i := range list.Items {
		if len(sel.names) == 0 || slices.Contains(sel.names, list.Items[i].GetName()) {
			add(&list.Items[i])
		}
	}
	return nil
}

func objectOf(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}
