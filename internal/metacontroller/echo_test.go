package metacontroller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/testenv"
)

// TestOwnWritesSyncNothing: the events of what a sync wrote (its children,
// the parent's status) map to no sync, in Reference mode (name only) as
// with the whole object (classic); another writer's change of a child, and
// its deletion, still sync its parent.
func TestOwnWritesSyncNothing(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	helloWorld(t, env, ns, "p")
	h := &hooks{customize: `{"relatedResources":[]}`, children: func(map[string]any) []any {
		return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "p-child"}, "data": map[string]any{"a": "1"}}}
	}}
	c := composite(t, env, h.serve(t))
	cfg := &Config{Controllers: []*Controller{c}}
	r := &Reconciler{Client: env.Client, Config: cfg, Hooks: &HookClient{}}
	if _, err := r.Reconcile(ctx, CompositeKey("hello", ns, "p")); err != nil {
		t.Fatal(err)
	}
	cms, parents := kindOf(cfg, "ConfigMap"), kindOf(cfg, "HelloWorld")
	child := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p-child"}, child); err != nil {
		t.Fatal(err)
	}
	parent := &unstructured.Unstructured{}
	parent.SetGroupVersionKind(helloGVK)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, parent); err != nil {
		t.Fatal(err)
	}
	childObj := &unstructured.Unstructured{}
	childObj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(child), childObj); err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string][]string{
		"the child, by name":         mapped(t, cms, env.Client, ref(ns, "p-child")),
		"the child, whole":           mapped(t, cms, env.Client, childObj),
		"the parent, by name":        mapped(t, parents, env.Client, ref(ns, "p")),
		"the parent, whole (status)": mapped(t, parents, env.Client, parent),
	} {
		if len(got) != 0 {
			t.Errorf("the sync's own write of %s maps to %v, want nothing", what, got)
		}
	}

	child.Data["a"] = "someone else"
	if err := env.Client.Update(ctx, child); err != nil {
		t.Fatal(err)
	}
	if got := mapped(t, cms, env.Client, ref(ns, "p-child")); !equal(got, []string{"p"}) {
		t.Fatalf("another writer's change of the child maps to %v, want its parent", got)
	}
	if _, err := r.Reconcile(ctx, CompositeKey("hello", ns, "p")); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(child), childObj); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, child); err != nil {
		t.Fatal(err)
	}
	// classic: the deletion's event carries the version the sync left
	if got := mapped(t, cms, env.Client, childObj); !equal(got, []string{"p"}) {
		t.Fatalf("the child's deletion maps to %v, want its parent", got)
	}
}

func ref(ns, name string) client.Object {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
