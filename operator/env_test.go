package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/operator"
)

// TestDescribeCarriesEnv: builder.WithEnv and WithSecretEnv reach the
// description (what `opzero manifests` reads), in declared order.
func TestDescribeCarriesEnv(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	out := filepath.Join(t.TempDir(), "d.json")
	t.Setenv(description.Env, out)
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	rt, err := operator.New(operator.Options{Mode: operator.Serverless, Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := builder.ControllerManagedBy(rt).For(&corev1.ConfigMap{}).
		WithEnv("REGION", "eu").WithSecretEnv("API_KEY", "api", "key").Complete(r); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
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
	env := d.Operators[0].Env
	if len(env) != 2 || env[0] != (description.EnvVar{Name: "REGION", Value: "eu"}) ||
		env[1].Name != "API_KEY" || env[1].Value != "" || env[1].Secret == nil || *env[1].Secret != (description.KeyRef{Name: "api", Key: "key"}) {
		t.Fatalf("env %+v", env)
	}
}
