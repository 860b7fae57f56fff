package metacontroller

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/knativenames"
)

// The event sources of a serverless opzero-metacontroller, as `opzero
// manifests` names them: the hub's Subscription is the operator's name;
// with Knative's sources, each kind's ApiServerSource is
// "<operator>-<kind>", the CompositeController's among them.
var (
	subscriptionGVK    = schema.GroupVersionKind{Group: "opzero.dev", Version: "v1alpha1", Kind: "Subscription"}
	apiServerSourceGVK = schema.GroupVersionKind{Group: "sources.knative.dev", Version: "v1", Kind: "ApiServerSource"}
)

// uncoveredKinds are the related kinds the operator learned at run time
// (Controller.Learned) that no source `opzero manifests` wrote delivers
// whole: not watched at all, or watched only through a label selector.
func (cfg *Config) uncoveredKinds() []Resource {
	static := &Config{}
	for _, c := range cfg.Controllers {
		s := *c
		s.Learned = nil
		static.Controllers = append(static.Controllers, &s)
	}
	covered := map[schema.GroupKind]bool{}
	for _, k := range static.kinds() {
		covered[k.gvk.GroupKind()] = k.sourceSelector() == ""
	}
	seen := map[schema.GroupKind]bool{}
	var out []Resource
	for _, c := range cfg.Controllers {
		for _, r := range c.Learned {
			gk := r.GVK.GroupKind()
			if !covered[gk] && !seen[gk] {
				seen[gk] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// EnsureRelatedSources makes the serverless operator's event sources in
// namespace ns deliver the related kinds it learned: they are added to its
// hub Subscription (Reference mode), or, wired with Knative's sources, an
// ApiServerSource "<operator>-related-<kind>" is created beside the
// CompositeController's, to the same sink, with the operator's service
// account (which `opzero manifests` lets read every resource when a
// controller's related resources are learned). It says what it did.
func EnsureRelatedSources(ctx context.Context, c client.Client, cfg *Config, ns string) ([]string, error) {
	kinds := cfg.uncoveredKinds()
	if len(kinds) == 0 {
		return nil, nil
	}
	sub := &unstructured.Unstructured{}
	sub.SetGroupVersionKind(subscriptionGVK)
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: Name}, sub)
	switch {
	case err == nil:
		return ensureSubscribed(ctx, c, sub, kinds)
	case !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
		return nil, fmt.Errorf("reading the operator's Subscription %s/%s: %w", ns, Name, err)
	}
	primary := &unstructured.Unstructured{}
	primary.SetGroupVersionKind(apiServerSourceGVK)
	name := Name + "-compositecontroller"
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, primary); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("no event source of the operator in namespace %s (neither the Subscription %s nor the ApiServerSource %s, as `opzero manifests` writes them): "+
				"changes of the related resources %s are not delivered", ns, Name, name, resourceNames(kinds))
		}
		return nil, fmt.Errorf("reading the ApiServerSource %s/%s: %w", ns, name, err)
	}
	var did []string
	for _, k := range kinds {
		src := relatedSource(primary, k)
		err := c.Create(ctx, src)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return did, fmt.Errorf("creating the ApiServerSource %s/%s for the related resource %s: %w", ns, src.GetName(), k.GVR.GroupResource(), err)
		}
		did = append(did, "created ApiServerSource "+ns+"/"+src.GetName()+" for "+k.GVR.GroupResource().String())
	}
	return did, nil
}

// ensureSubscribed adds the kinds the Subscription lacks, unfiltered.
func ensureSubscribed(ctx context.Context, c client.Client, sub *unstructured.Unstructured, kinds []Resource) ([]string, error) {
	res, _, _ := unstructured.NestedSlice(sub.Object, "spec", "resources")
	var did []string
	for _, k := range kinds {
		has := false
		for _, x := range res {
			m, _ := x.(map[string]any)
			_, sel := m["labelSelector"]
			_, owner := m["owner"]
			_, ref := m["referencedBy"]
			has = has || (m["apiVersion"] == k.APIVersion() && m["kind"] == k.GVK.Kind && !sel && !owner && !ref)
		}
		if !has {
			res = append(res, map[string]any{"apiVersion": k.APIVersion(), "kind": k.GVK.Kind, "mode": "Reference"})
			did = append(did, "subscribed to "+k.GVR.GroupResource().String()+" in Subscription "+sub.GetNamespace()+"/"+sub.GetName())
		}
	}
	if len(did) == 0 {
		return nil, nil
	}
	if err := unstructured.SetNestedSlice(sub.Object, res, "spec", "resources"); err != nil {
		return nil, err
	}
	if err := c.Update(ctx, sub); err != nil {
		return nil, fmt.Errorf("adding the related resources %s to the Subscription %s/%s: %w", resourceNames(kinds), sub.GetNamespace(), sub.GetName(), err)
	}
	return did, nil
}

// relatedSourceName names the ApiServerSource of a learned kind.
func relatedSourceName(k Resource) string {
	name := Name + "-related-" + strings.ToLower(k.GVK.Kind)
	if k.GVK.Group != "" {
		name += "-" + strings.ReplaceAll(k.GVK.Group, ".", "-")
	}
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	return name
}

// relatedSenders are the OIDC identities (Knative's service account per
// source) of the ApiServerSources of the learned kinds in namespace ns:
// the operator accepts their events beside those of --allowed-senders.
func (cfg *Config) relatedSenders(ns string) []string {
	var out []string
	for _, k := range cfg.uncoveredKinds() {
		out = append(out, "system:serviceaccount:"+ns+":"+knativenames.OIDCServiceAccount(relatedSourceName(k), apiServerSourceGVK.Group, apiServerSourceGVK.Kind))
	}
	return out
}

// relatedSource is the ApiServerSource of a learned kind, beside primary.
func relatedSource(primary *unstructured.Unstructured, k Resource) *unstructured.Unstructured {
	sink, _, _ := unstructured.NestedMap(primary.Object, "spec", "sink")
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiServerSourceGVK)
	u.SetNamespace(primary.GetNamespace())
	u.SetName(relatedSourceName(k))
	u.SetLabels(primary.GetLabels())
	u.Object["spec"] = map[string]any{
		"mode":               "Reference",
		"resources":          []any{map[string]any{"apiVersion": k.APIVersion(), "kind": k.GVK.Kind}},
		"serviceAccountName": Name,
		"namespaceSelector":  map[string]any{},
		"sink":               sink,
	}
	return u
}

func resourceNames(rs []Resource) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GVR.GroupResource().String())
	}
	return strings.Join(out, ", ")
}
