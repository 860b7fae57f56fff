// Package prune deletes what an earlier wiring of an operator left behind
// when its manifests are applied again in another (opzero dev, opzero
// cluster apply): the objects `opzero manifests` wrote for it, found by
// their labels and the field manager that applied them.
package prune

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Clients are the dynamic client and the (discovery-backed, resettable)
// REST mapper Earlier takes, for cfg.
func Clients(cfg *rest.Config) (dynamic.Interface, *restmapper.DeferredDiscoveryRESTMapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), nil
}

// The labels `opzero manifests` puts on what it writes for an operator.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelName      = "app.kubernetes.io/name"
)

// Kinds are the kinds of a wiring `opzero manifests` writes, which
// another wiring of the same operator replaces: pruned when left over.
// CRDs, Namespaces, Secrets and the operator's own objects never are.
var Kinds = []schema.GroupVersionKind{
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "serving.knative.dev", Version: "v1", Kind: "Service"},
	{Group: "sources.knative.dev", Version: "v1", Kind: "ApiServerSource"},
	{Group: "sources.knative.dev", Version: "v1", Kind: "PingSource"},
	{Group: "eventing.knative.dev", Version: "v1", Kind: "Trigger"},
	{Group: "opzero.dev", Version: "v1alpha1", Kind: "Subscription"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"},
	{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
}

// Earlier deletes what an earlier apply left of another wiring of the
// same operators (--source=knative's ApiServerSources and wakeup source
// after a switch to the hub, a classic Deployment after a switch to
// serverless): objects of the wiring kinds that fieldManager applied,
// labelled managed-by opzero with the name of an operator whose objects
// are among objects (just applied, a namespaced one with its namespace
// set), of its install (its namespaces; for cluster-scoped ones, a name
// of them: sameInstall), and not among objects. Without it their
// processes would run beside the new wiring's, delivering every change
// twice. The hub's own objects carry no operator's name: never pruned. It
// returns what it deleted ("Kind namespace/name").
func Earlier(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, objects []*unstructured.Unstructured, fieldManager string) ([]string, error) {
	names := map[string]bool{}
	nsOf := map[string]map[string]bool{} // operator -> the namespaces of its objects here
	keep := map[string]bool{}
	for _, u := range objects {
		if l := u.GetLabels(); l[labelManagedBy] == "opzero" && l[labelName] != "" {
			names[l[labelName]] = true
			if u.GetNamespace() != "" {
				if nsOf[l[labelName]] == nil {
					nsOf[l[labelName]] = map[string]bool{}
				}
				nsOf[l[labelName]][u.GetNamespace()] = true
			}
		}
		// applied first: a namespaced object has its namespace set (the
		// applier's default), a cluster-scoped one none
		keep[u.GroupVersionKind().GroupKind().String()+" "+u.GetNamespace()+"/"+u.GetName()] = true
	}
	if len(names) == 0 {
		return nil, nil
	}
	req, err := labels.NewRequirement(labelName, selection.In, slices.Sorted(maps.Keys(names)))
	if err != nil {
		return nil, err
	}
	sel := labels.NewSelector().Add(*req)
	mb, _ := labels.NewRequirement(labelManagedBy, selection.Equals, []string{"opzero"})
	sel = sel.Add(*mb)
	var deleted []string
	for _, gvk := range Kinds {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue // not served here: nothing of it to prune
		}
		if err != nil {
			return deleted, err
		}
		l, err := dyn.Resource(m.Resource).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return deleted, fmt.Errorf("listing %s to prune an earlier wiring: %w", m.Resource.Resource, err)
		}
		for i := range l.Items {
			u := &l.Items[i]
			id := gvk.GroupKind().String() + " " + u.GetNamespace() + "/" + u.GetName()
			if keep[id] || u.GetDeletionTimestamp() != nil || !appliedBy(u, fieldManager) || !sameInstall(u, nsOf[u.GetLabels()[labelName]]) {
				continue
			}
			ri := dyn.Resource(m.Resource).Namespace(u.GetNamespace())
			bg := metav1.DeletePropagationBackground
			if err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
				return deleted, fmt.Errorf("deleting %s, left by an earlier wiring: %w", id, err)
			}
			deleted = append(deleted, strings.Replace(id, " /", " ", 1))
		}
	}
	return deleted, nil
}

// sameInstall reports whether u belongs to the install of its operator in
// one of namespaces (the same operator may run in others): a namespaced
// object in one of them, a cluster-scoped one named for one
// (opzero:<namespace>:<operator>..., as `opzero manifests` names them).
func sameInstall(u *unstructured.Unstructured, namespaces map[string]bool) bool {
	if u.GetNamespace() != "" {
		return namespaces[u.GetNamespace()]
	}
	for ns := range namespaces {
		if strings.Contains(u.GetName(), ":"+ns+":") {
			return true
		}
	}
	return false
}

// appliedBy reports whether fieldManager wrote u.
func appliedBy(u *unstructured.Unstructured, fieldManager string) bool {
	for _, f := range u.GetManagedFields() {
		if f.Manager == fieldManager {
			return true
		}
	}
	return false
}
