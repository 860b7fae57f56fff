package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/operator"
)

// TestDescribeInsteadOfServing: with OPZERO_DESCRIBE, New connects to
// nothing (there is no API server here), Start writes the description and
// returns nil, in either mode.
func TestDescribeInsteadOfServing(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	for _, mode := range []operator.Mode{operator.Serverless, operator.Classic} {
		t.Run(string(mode), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "d.json")
			t.Setenv(description.Env, out)
			t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
			rt, err := operator.New(operator.Options{Mode: mode, Scheme: scheme}) // no --audience: not checked when describing
			if err != nil {
				t.Fatal(err)
			}
			r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
			err = builder.ControllerManagedBy(rt).Named("cw").
				For(&v1.ConfigWatcher{}, builder.WithLabelSelector(labels.SelectorFromSet(labels.Set{"team": "a"}))).
				Owns(&corev1.Pod{}).Owns(&appsv1.Deployment{}).
				Watches(&corev1.ConfigMap{}, func(context.Context, client.Reader, client.Object) ([]reconcile.Request, error) { return nil, nil },
					builder.ReferencedBy("spec.configMap")).
				WithSweep("@hourly", "").WithScale(0, 7).WithConcurrency(2).
				Complete(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Start(context.Background()); err != nil {
				t.Fatalf("Start while describing: %v", err)
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
			if d.Mode != string(mode) || len(d.Operators) != 1 {
				t.Fatalf("got %+v", d)
			}
			op := d.Operators[0]
			p := op.Primary
			if op.Name != "cw" || p.Group != "k8spatterns.io" || p.Kind != "ConfigWatcher" || p.Resource != "configwatchers" ||
				p.Selector != "team=a" || p.GoPackage != "github.com/opzero/opzero/examples/configwatcher/api/v1" {
				t.Errorf("primary %+v", p)
			}
			if len(op.Owned) != 2 || op.Owned[0].Kind != "Pod" || op.Owned[1].Kind != "Deployment" || op.Owned[1].Group != "apps" {
				t.Errorf("owned %+v, want Pod then apps Deployment (sorted by group)", op.Owned)
			}
			if len(op.Watched) != 1 || op.Watched[0].Resource != "configmaps" || op.Watched[0].ReferencedBy != "spec.configMap" {
				t.Errorf("watched %+v", op.Watched)
			}
			if want := (description.Deploy{Sweep: "@hourly", MaxScale: 7, Concurrency: 2}); op.Deploy != want {
				t.Errorf("deploy %+v, want %+v", op.Deploy, want)
			}
		})
	}
}
