package unchanged

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// FromCluster reads from the cluster what Derive reads from a release:
// the Deployment, every RoleBinding and ClusterRoleBinding with the roles
// they name, the CRDs, the Deployment's namespace's Services and
// cert-manager Certificates, and the webhook configurations.
func FromCluster(ctx context.Context, cfg *rest.Config, deployment string) ([]map[string]any, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(deployment, "/")
	d, err := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Deployment %s: %w", deployment, err)
	}
	out := []map[string]any{d.Object}
	rbac := func(res string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: res}
	}
	for _, l := range []struct {
		gvr schema.GroupVersionResource
		ns  string
	}{
		{rbac("rolebindings"), ""}, {rbac("clusterrolebindings"), ""}, {rbac("roles"), ""}, {rbac("clusterroles"), ""},
		{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, ""},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, ns},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, ""},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, ""},
	} {
		items, err := dyn.Resource(l.gvr).Namespace(l.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s (--from-cluster reads the operator's RBAC, CRDs and webhooks; your account needs list on them): %w", l.gvr.Resource, err)
		}
		for _, it := range items.Items {
			if it.GetKind() == "" { // a list's items carry no kind
				it.SetGroupVersionKind(items.GroupVersionKind().GroupVersion().WithKind(strings.TrimSuffix(items.GetKind(), "List")))
			}
			out = append(out, it.Object)
		}
	}
	// cert-manager's Certificates, whose Secrets hold the CA of webhooks
	// it injects (none when cert-manager is not installed).
	certs, err := dyn.Resource(schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}).Namespace(ns).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		for _, it := range certs.Items {
			it.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"})
			out = append(out, it.Object)
		}
	case !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
		return nil, fmt.Errorf("listing cert-manager's certificates in %s: %w", ns, err)
	}
	return out, nil
}
