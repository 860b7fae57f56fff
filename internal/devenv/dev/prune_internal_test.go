package dev

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/testenv"
)

func labelled(apiVersion, kind, ns, name, operator string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "opzero", "app.kubernetes.io/name": operator}}}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

// TestPruneAnEarlierWiring (real API server): a session of operator op's
// hub wiring deletes what a session of its --source=knative wiring
// applied and this one does not (its ApiServerSource, the sources'
// service account and ClusterRole), and nothing else: not what it applies
// again, not another operator's, not the same operator's install in
// another namespace, not what another field manager wrote, not a kind no
// wiring has.
func TestPruneAnEarlierWiring(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	a, err := newApplier(env.Config, ns)
	if err != nil {
		t.Fatal(err)
	}
	source := labelled("sources.knative.dev/v1", "ApiServerSource", ns, "op-configmaps", "op")
	source.Object["spec"] = map[string]any{"mode": "Reference", "resources": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}},
		"sink": map[string]any{"uri": "http://op.example"}}
	earlier := []*unstructured.Unstructured{
		source,
		labelled("v1", "ServiceAccount", ns, "op-sources", "op"),
		labelled("rbac.authorization.k8s.io/v1", "ClusterRole", "", "opzero:"+ns+":op-sources", "op"),
		labelled("v1", "ServiceAccount", ns, "op", "op"),       // applied again
		labelled("v1", "ServiceAccount", ns, "other", "other"), // another operator's
		labelled("v1", "ConfigMap", ns, "op-settings", "op"),   // no wiring's kind
	}
	elsewhere := env.Namespace(t) // the same operator installed in another namespace
	earlier = append(earlier, labelled("v1", "ServiceAccount", elsewhere, "op-sources", "op"),
		labelled("rbac.authorization.k8s.io/v1", "ClusterRole", "", "opzero:"+elsewhere+":op-sources", "op"))
	if err := a.applyAll(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	byKubectl := labelled("v1", "ServiceAccount", ns, "op-by-hand", "op")
	if _, err := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(ns).Create(ctx, byKubectl, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
		t.Fatal(err)
	}

	now := []*unstructured.Unstructured{labelled("v1", "ServiceAccount", ns, "op", "op")}
	if err := a.applyAll(ctx, now); err != nil {
		t.Fatal(err)
	}
	p := &Platform{apply: a, opts: Options{Objects: now, Namespace: ns}}
	deleted, err := p.prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	want := []string{"ApiServerSource.sources.knative.dev " + ns + "/op-configmaps", "ClusterRole.rbac.authorization.k8s.io opzero:" + ns + ":op-sources", "ServiceAccount " + ns + "/op-sources"}
	if strings.Join(deleted, "\n") != strings.Join(want, "\n") {
		t.Fatalf("pruned:\n%s\nwant:\n%s", strings.Join(deleted, "\n"), strings.Join(want, "\n"))
	}
	for _, u := range []*unstructured.Unstructured{labelled("v1", "ServiceAccount", ns, "op", "op"), labelled("v1", "ServiceAccount", ns, "other", "other"),
		labelled("v1", "ServiceAccount", elsewhere, "op-sources", "op"), labelled("rbac.authorization.k8s.io/v1", "ClusterRole", "", "opzero:"+elsewhere+":op-sources", "op"),
		labelled("v1", "ConfigMap", ns, "op-settings", "op"), byKubectl} {
		if _, err := a.get(ctx, u); err != nil {
			t.Errorf("%s %s was deleted: %v", u.GetKind(), u.GetName(), err)
		}
	}
	// Again: nothing left to prune.
	if deleted, err := p.prune(ctx); err != nil || len(deleted) != 0 {
		t.Errorf("a second prune deleted %v (%v)", deleted, err)
	}
}
