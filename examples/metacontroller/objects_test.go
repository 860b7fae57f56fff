package metacontroller_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/testenv"
)

// TestMetacontrollerObjectsApplyUnchanged: objects written for
// Metacontroller, every field of its API used, are accepted by opzero's
// CRDs with strict field validation and read back unchanged.
func TestMetacontrollerObjectsApplyUnchanged(t *testing.T) {
	env := testenv.Get(t)
	objs, err := dev.ReadManifests("testdata/metacontroller-objects.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range objs {
		want := o.DeepCopy()
		if err := env.Client.Create(ctx, o, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Fatal(err)
		}
		if !equalJSON(got.Object["spec"], want.Object["spec"]) {
			t.Fatalf("%s %s: spec read back as\n%v\nwant\n%v", o.GetKind(), o.GetName(), got.Object["spec"], want.Object["spec"])
		}
	}
}
