package builder_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
)

// Primaries name the ConfigMap they read in one field (for the example, a
// Service's spec.externalName): with the hub delivering events, only the
// ConfigMaps some primary names wake the operator; the map function still
// decides which keys to reconcile.
func ExampleReferencedBy() {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	byName := func(context.Context, client.Reader, client.Object) ([]reconcile.Request, error) { return nil, nil }
	op, err := builder.New(s).For(&corev1.Service{}).
		Watches(&corev1.ConfigMap{}, byName, builder.ReferencedBy("spec.externalName")).
		Build(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	fmt.Println(op.Watched[0].GVK.Kind, op.Watched[0].ReferencedBy, err)
	// Output: ConfigMap spec.externalName <nil>
}
