package prune_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/cluster"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{KnativeCRDs: true, CRDDirs: []string{"../../../config/crd/opzero.dev_subscriptions.yaml"}, NoControllerManager: true}))
}

func object(apiVersion, kind, ns, name, operator string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}}
	if operator != "" {
		u.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "opzero", "app.kubernetes.io/name": operator})
	}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

func manifest(t *testing.T, objs ...*unstructured.Unstructured) string {
	t.Helper()
	var b strings.Builder
	for _, u := range objs {
		y, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String()
}

// TestSwitchingWiringWithClusterApply (real API server): what `opzero
// cluster apply` applied of an operator's --source=knative wiring (its
// ApiServerSource, the sources' service account) is deleted when its hub
// wiring is applied next, as its field manager; the hub's objects (no
// operator's name), what the new wiring applies again, what another field
// manager wrote, and a namespaced object given without a namespace (the
// kubeconfig's namespace, as kubectl applies it) are left. Switching back
// deletes the hub wiring's Subscription, not the shared hub.
func TestSwitchingWiringWithClusterApply(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	apply := func(manager string, objs ...*unstructured.Unstructured) {
		t.Helper()
		for _, u := range objs {
			m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
			if err != nil {
				t.Fatal(err)
			}
			ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
			}
			if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: manager, Force: true}); err != nil {
				t.Fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
	source := object("sources.knative.dev/v1", "ApiServerSource", ns, "op-configmaps", "op")
	source.Object["spec"] = map[string]any{"mode": "Reference", "resources": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}},
		"sink": map[string]any{"uri": "http://op.example"}}
	shared := object("v1", "ServiceAccount", ns, "opzero-hub", "") // the hub's: no operator's name
	sub := object("opzero.dev/v1alpha1", "Subscription", ns, "op", "op")
	sub.Object["spec"] = map[string]any{"operator": "op", "serviceAccountName": "op", "sink": map[string]any{"uri": "http://op.example"}}
	knative := []*unstructured.Unstructured{source, object("v1", "ServiceAccount", ns, "op-sources", "op"), object("v1", "ServiceAccount", ns, "op", "op")}
	apply(cluster.ApplyFieldManager, knative...)
	byHand := object("v1", "ServiceAccount", ns, "op-by-hand", "op")
	apply("kubectl", byHand)

	hub := []*unstructured.Unstructured{object("v1", "ServiceAccount", ns, "op", "op"), sub, shared}
	apply(cluster.ApplyFieldManager, hub...)
	// As written by opzero manifests: the operator's own service account
	// without a namespace, which kubectl puts in the kubeconfig's.
	noNS := object("v1", "ServiceAccount", "", "op", "op")
	pruned, err := cluster.PruneEarlier(ctx, env.Config, manifest(t, noNS, sub, shared), ns)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pruned)
	if want := []string{"ApiServerSource.sources.knative.dev " + ns + "/op-configmaps", "ServiceAccount " + ns + "/op-sources"}; !slices.Equal(pruned, want) {
		t.Fatalf("switching to the hub pruned %q, want %q", pruned, want)
	}
	get := func(u *unstructured.Unstructured) error {
		m, _ := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		_, err := dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		return err
	}
	for _, u := range []*unstructured.Unstructured{object("v1", "ServiceAccount", ns, "op", "op"), sub, shared, byHand} {
		if err := get(u); err != nil {
			t.Errorf("%s %s: %v, want it kept", u.GetKind(), u.GetName(), err)
		}
	}

	// To classic: the Subscription goes, the hub stays.
	classic := []*unstructured.Unstructured{object("v1", "ServiceAccount", ns, "op", "op"), object("apps/v1", "Deployment", ns, "op", "op")}
	classic[1].Object["spec"] = map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "op"}},
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "op"}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "op", "image": "op"}}}}}
	apply(cluster.ApplyFieldManager, classic...)
	pruned, err = cluster.PruneEarlier(ctx, env.Config, manifest(t, classic...), ns)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Subscription.opzero.dev " + ns + "/op"}; !slices.Equal(pruned, want) {
		t.Errorf("switching to classic pruned %q, want %q", pruned, want)
	}
	if err := get(shared); err != nil {
		t.Errorf("the hub's service account: %v, want it kept", err)
	}
	if pruned, err := cluster.PruneEarlier(ctx, env.Config, manifest(t, classic...), ns); err != nil || len(pruned) != 0 {
		t.Errorf("applying the same wiring again pruned %q (%v), want nothing", pruned, err)
	}
	if _, err := cluster.PruneEarlier(ctx, env.Config, "kind: [", ns); err == nil {
		t.Error("a manifest that does not parse: no error")
	}
}
