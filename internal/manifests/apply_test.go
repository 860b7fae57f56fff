package manifests_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/testenv"
)

// TestServerSideDryRunApply: every generated object of every golden case
// passes a server-side apply in dry-run with strict field validation against
// the real Knative CRDs and Kubernetes' own types.
func TestServerSideDryRunApply(t *testing.T) {
	env := testenv.Get(t)
	for name, o := range goldenCases {
		t.Run(name, func(t *testing.T) {
			o.Namespace = env.Namespace(t)
			objs := generateCase(t, name, o)
			kinds := map[string]int{}
			for _, obj := range objs {
				u, err := unstructuredOf(obj)
				if err != nil {
					t.Fatal(err)
				}
				if u.GetKind() == "Namespace" {
					// created for real: a dry run creates nothing for the
					// objects after it to land in
					ensureNamespace(t, env, u.GetName())
				}
				if err := dryRunApply(context.Background(), env.Client, u); err != nil {
					t.Errorf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
				}
				kinds[u.GetKind()]++
			}
			t.Logf("%d objects applied (dry run): %v", len(objs), kinds)
		})
	}
}

// ensureNamespace creates namespace name if it is not there (the hub's
// opzero-system, shared by the tests that need it; never removed).
func ensureNamespace(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func dryRunApply(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	//nolint:staticcheck // client.Apply with unstructured is the plain way to server-side apply arbitrary YAML
	return c.Patch(ctx, u, client.Apply, client.DryRunAll, client.ForceOwnership,
		client.FieldOwner("opzero-manifests-test"), client.FieldValidation("Strict"))
}

// unstructuredOf reads an object back from its YAML (CRDs are kept as
// controller-gen's bytes).
func unstructuredOf(o manifests.Object) (*unstructured.Unstructured, error) {
	b, err := o.YAML()
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return nil, fmt.Errorf("%s %s: %w", o.Kind(), o.Name(), err)
	}
	return u, nil
}

// TestDryRunApplyCatchesMistakes: the dry run is not vacuous: wrong types
// in Knative objects are rejected. (Unknown fields in an ApiServerSource's
// spec are not: Knative's CRD preserves unknown fields there;
// TestKnativeFieldsAreDeclared covers those.)
func TestDryRunApplyCatchesMistakes(t *testing.T) {
	env := testenv.Get(t)
	o := goldenCases["serverless-knative"] // its ApiServerSources and PingSources too
	o.Namespace = env.Namespace(t)
	broken := map[string]func(map[string]any){
		"ApiServerSource": func(m map[string]any) { m["spec"].(map[string]any)["mode"] = int64(3) },
		"Service":         func(m map[string]any) { m["spec"].(map[string]any)["template"] = "not an object" },
		"PingSource":      func(m map[string]any) { m["spec"].(map[string]any)["schedule"] = []any{"not", "a", "string"} },
	}
	seen := map[string]bool{}
	for _, obj := range generate(t, o) {
		mutate := broken[obj.Kind()]
		if mutate == nil {
			continue
		}
		seen[obj.Kind()] = true
		u, err := unstructuredOf(obj)
		if err != nil {
			t.Fatal(err)
		}
		mutate(u.Object)
		if err := dryRunApply(context.Background(), env.Client, u); err == nil {
			t.Errorf("%s %s with a broken spec %v was accepted", u.GetKind(), u.GetName(), u.Object["spec"])
		}
	}
	if len(seen) != len(broken) {
		t.Errorf("checked %v, want all of %d kinds", seen, len(broken))
	}
}

// TestDryRunApplyCatchesSubscriptionMistakes: the Subscription's dry run is
// not vacuous either: its CRD's schema refuses a misspelt field and a mode
// it does not know.
func TestDryRunApplyCatchesSubscriptionMistakes(t *testing.T) {
	env := testenv.Get(t)
	o := goldenCases["serverless"]
	o.Namespace = env.Namespace(t)
	broken := map[string]func(spec map[string]any){
		"misspelt referencedBy": func(spec map[string]any) {
			r := spec["resources"].([]any)[1].(map[string]any)
			r["referenceBy"] = r["referencedBy"]
			delete(r, "referencedBy")
		},
		"unknown mode": func(spec map[string]any) { spec["resources"].([]any)[0].(map[string]any)["mode"] = "Object" },
	}
	for _, obj := range generate(t, o) {
		if obj.Kind() != "Subscription" {
			continue
		}
		for name, mutate := range broken {
			u, err := unstructuredOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			if err := dryRunApply(context.Background(), env.Client, u); err != nil {
				t.Fatalf("the generated Subscription: %v", err)
			}
			mutate(u.Object["spec"].(map[string]any))
			if err := dryRunApply(context.Background(), env.Client, u); err == nil {
				t.Errorf("%s: a Subscription with spec %v was accepted", name, u.Object["spec"])
			}
		}
		return
	}
	t.Fatal("no Subscription generated")
}
