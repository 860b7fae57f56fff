package dev

import (
	"context"
	"fmt"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/opzero/opzero/internal/devenv/knative"
	"github.com/opzero/opzero/internal/knativenames"
)

// sink is a resolved spec.sink.
type sink struct {
	URI      string
	Audience string
}

// resolveSink reads spec.sink of a source (resolveDestination).
func (p *Platform) resolveSink(ctx context.Context, u *unstructured.Unstructured) (sink, error) {
	return p.resolveDestination(ctx, u, "spec", "sink")
}

// resolveDestination reads a Knative Destination at path in u: a ref to a
// Knative Service or a Broker (its status.address.url, read back from the
// API server, plus a ref-relative uri) or a plain uri. Other refs
// (Channel, ...) are not played locally.
func (p *Platform) resolveDestination(ctx context.Context, u *unstructured.Unstructured, path ...string) (sink, error) {
	where := u.GetKind() + " " + key(u)
	field := strings.Join(path, ".")
	s := sink{}
	s.Audience, _, _ = unstructured.NestedString(u.Object, append(path, "audience")...)
	uri, _, _ := unstructured.NestedString(u.Object, append(path, "uri")...)
	ref, ok, _ := unstructured.NestedStringMap(u.Object, append(path, "ref")...)
	if !ok {
		if uri == "" {
			return s, fmt.Errorf("%s: %s has neither ref nor uri", where, field)
		}
		s.URI = rewrite(uri, p.localURLs)
		return s, nil
	}
	isService := ref["kind"] == "Service" && strings.HasPrefix(ref["apiVersion"], "serving.knative.dev/")
	isBroker := ref["kind"] == "Broker" && strings.HasPrefix(ref["apiVersion"], "eventing.knative.dev/")
	if !isService && !isBroker {
		return s, fmt.Errorf("%s: %s ref %s %s: opzero dev resolves only Knative Services (serving.knative.dev), Brokers (eventing.knative.dev) and uris", where, field, ref["apiVersion"], ref["kind"])
	}
	ns := ref["namespace"]
	if ns == "" {
		ns = u.GetNamespace()
	}
	target := &unstructured.Unstructured{}
	target.SetAPIVersion(ref["apiVersion"])
	target.SetKind(ref["kind"])
	target.SetNamespace(ns)
	target.SetName(ref["name"])
	got, err := p.apply.get(ctx, target)
	if err != nil {
		return s, fmt.Errorf("%s: %s: %w", where, field, err)
	}
	base, _, _ := unstructured.NestedString(got.Object, "status", "address", "url")
	if base == "" {
		return s, fmt.Errorf("%s: %s %s %s/%s has no status.address.url (is it in the manifests?)", where, field, ref["kind"], ns, ref["name"])
	}
	s.URI = strings.TrimRight(base, "/") + uri
	return s, nil
}

// oidcServiceAccount is the name Knative gives u's OIDC identity.
func oidcServiceAccount(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return knativenames.OIDCServiceAccount(u.GetName(), gvk.Group, gvk.Kind)
}

// ensureOIDCIdentity creates the source's OIDC ServiceAccount, owned by the
// source, as Knative's controller does with the authentication-oidc feature.
func ensureOIDCIdentity(ctx context.Context, cs kubernetes.Interface, u *unstructured.Unstructured) (string, error) {
	name := oidcServiceAccount(u)
	t := true
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: u.GetNamespace(),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), UID: u.GetUID(), Controller: &t}}}}
	if _, err := cs.CoreV1().ServiceAccounts(u.GetNamespace()).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("%s %s: creating its OIDC ServiceAccount %s: %w", u.GetKind(), key(u), name, err)
	}
	return name, nil
}

// apiServerSource turns an ApiServerSource into the adapter's configuration.
func (p *Platform) apiServerSource(ctx context.Context, u *unstructured.Unstructured) (knative.ApiServerSourceConfig, error) {
	where := "ApiServerSource " + key(u)
	c := knative.ApiServerSourceConfig{Name: u.GetName(), Namespace: u.GetNamespace(), Kubeconfig: p.kubeconfig}
	c.Mode, _, _ = unstructured.NestedString(u.Object, "spec", "mode")
	resources, _, _ := unstructured.NestedSlice(u.Object, "spec", "resources")
	if len(resources) == 0 {
		return c, fmt.Errorf("%s: spec.resources is empty", where)
	}
	for _, r := range resources {
		m, _ := r.(map[string]any)
		av, _, _ := unstructured.NestedString(m, "apiVersion")
		kind, _, _ := unstructured.NestedString(m, "kind")
		gv, err := schema.ParseGroupVersion(av)
		if err != nil || kind == "" {
			return c, fmt.Errorf("%s: resource %v: want apiVersion and kind", where, m)
		}
		mapping, err := p.apply.mapping(ctx, gv.WithKind(kind))
		if err != nil {
			return c, fmt.Errorf("%s: resource %s %s is not served: %w", where, av, kind, err)
		}
		res := knative.Resource{Group: gv.Group, Version: gv.Version, Resource: mapping.Resource.Resource}
		if sel, ok := m["selector"].(map[string]any); ok {
			ls := &metav1.LabelSelector{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, ls); err != nil {
				return c, fmt.Errorf("%s: resource %s selector: %w", where, kind, err)
			}
			s, err := metav1.LabelSelectorAsSelector(ls)
			if err != nil {
				return c, fmt.Errorf("%s: resource %s selector: %w", where, kind, err)
			}
			res.LabelSelector = s.String()
		}
		c.Resources = append(c.Resources, res)
	}
	if owner, ok, _ := unstructured.NestedStringMap(u.Object, "spec", "owner"); ok {
		c.Owner = &knative.Owner{APIVersion: owner["apiVersion"], Kind: owner["kind"]}
	}
	if ext, ok, _ := unstructured.NestedStringMap(u.Object, "spec", "ceOverrides", "extensions"); ok {
		c.CEOverrides = ext
	}
	nsSel, hasSel, _ := unstructured.NestedMap(u.Object, "spec", "namespaceSelector")
	switch {
	case !hasSel:
		c.Namespaces = []string{u.GetNamespace()}
	case len(nsSel) == 0:
		c.AllNamespaces = true
	default:
		ls := &metav1.LabelSelector{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(nsSel, ls); err != nil {
			return c, fmt.Errorf("%s: namespaceSelector: %w", where, err)
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return c, fmt.Errorf("%s: namespaceSelector: %w", where, err)
		}
		list, err := p.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return c, err
		}
		for _, n := range list.Items { // fixed at start, unlike Knative's controller
			c.Namespaces = append(c.Namespaces, n.Name)
		}
		if len(c.Namespaces) == 0 {
			return c, fmt.Errorf("%s: namespaceSelector %s matches no namespace", where, sel)
		}
	}
	return c, nil
}

// checkPermissions asks, like Knative's controller, whether the source's
// service account may get, list and watch every resource it names.
func (p *Platform) checkPermissions(ctx context.Context, u *unstructured.Unstructured, c knative.ApiServerSourceConfig) error {
	sa, _, _ := unstructured.NestedString(u.Object, "spec", "serviceAccountName")
	if sa == "" {
		sa = "default"
	}
	user := "system:serviceaccount:" + u.GetNamespace() + ":" + sa
	nss := c.Namespaces
	if c.AllNamespaces {
		nss = []string{""}
	}
	var missing []string
	for _, r := range c.Resources {
		for _, ns := range nss {
			for _, verb := range []string{"get", "list", "watch"} {
				sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + u.GetNamespace(), "system:authenticated"},
					ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: r.Group, Version: r.Version, Resource: r.Resource}}}
				got, err := p.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				if !got.Status.Allowed {
					missing = append(missing, fmt.Sprintf("%s %s.%s in %q", verb, r.Resource, r.Group, ns))
				}
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("ApiServerSource %s: service account %s may not %s (Knative would not deploy its adapter: add RBAC)", key(u), user, strings.Join(missing, ", "))
	}
	return nil
}

// sourceStatus is what Knative's source controllers write once the adapter
// runs: every condition True, the resolved sink, and the OIDC identity.
func sourceStatus(u *unstructured.Unstructured, s sink, oidcSA string, condTypes ...string) map[string]any {
	now := time.Now().UTC().Format(time.RFC3339)
	var conds []any
	for _, t := range append(condTypes, "Ready") {
		conds = append(conds, map[string]any{"type": t, "status": "True", "lastTransitionTime": now})
	}
	st := map[string]any{"observedGeneration": u.GetGeneration(), "sinkUri": s.URI, "conditions": conds}
	if s.Audience != "" {
		st["sinkAudience"] = s.Audience
		st["auth"] = map[string]any{"serviceAccountName": oidcSA}
	}
	return st
}
