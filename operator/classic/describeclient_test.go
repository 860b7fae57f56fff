package classic_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

// TestDescribingMapFunctionsList: a For-less controller whose map
// function lists through the manager's client (a Namespace mapped to
// every ConfigMap of a namespace, as a project maps one to its Bundles) is
// described: finding its kind runs that function on a probe object, and
// the client it gets answers an error, not a nil pointer (the binary
// panicked before describing itself).
func TestDescribingMapFunctionsList(t *testing.T) {
	out := filepath.Join(t.TempDir(), "d.json")
	t.Setenv(description.Env, out)
	cfg := &rest.Config{Host: "https://127.0.0.1:1"} // nothing is connected to
	mgr, err := classic.NewManager(operator.Options{}, cfg, manager.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var listErr error
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var l corev1.ConfigMapList
		listErr = mgr.GetClient().List(ctx, &l, client.InNamespace("a"))
		if listErr == nil {
			listErr = mgr.GetAPIReader().List(ctx, &l)
		}
		return nil
	})
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	err = builder.ControllerManagedBy(mgr).Named("for-less").
		Watches(&corev1.ConfigMap{}, &handler.EnqueueRequestForObject{}).
		Watches(&corev1.Namespace{}, all).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatalf("Start while describing: %v", err)
	}
	if listErr == nil {
		t.Error("the map function's List succeeded while describing: want the describing client's error")
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := description.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Operators) != 1 || d.Operators[0].Primary.Kind != "ConfigMap" {
		t.Fatalf("described %+v, want one operator of ConfigMaps", d.Operators)
	}
}
