package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/operator"
)

// TestPFlagsDescribed: a cobra/pflag project's flags (BindPFlags) are
// described as the binary's, so `opzero manifests --` arguments naming
// them (--trust-namespace=...) are not refused as flags it lacks.
func TestPFlagsDescribed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "d.json")
	t.Setenv(description.Env, out)
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	fs := pflag.NewFlagSet("project", pflag.ContinueOnError)
	fs.String("trust-namespace", "bundles-system", "")
	fs.Int("readiness-probe-port", 6060, "")
	var o operator.Options
	o.BindPFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	rt, err := operator.New(o)
	if err != nil {
		t.Fatal(err)
	}
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := builder.ControllerManagedBy(rt).Named("cm").For(&corev1.ConfigMap{}).Complete(r); err != nil {
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
	for _, want := range []string{"trust-namespace", "readiness-probe-port", "mode"} {
		if !slices.Contains(d.Flags, want) {
			t.Errorf("described flags %v, want %s among them", d.Flags, want)
		}
	}
	if !slices.IsSorted(d.Flags) || len(slices.Compact(slices.Clone(d.Flags))) != len(d.Flags) {
		t.Errorf("described flags %v: want sorted, each once", d.Flags)
	}
}
