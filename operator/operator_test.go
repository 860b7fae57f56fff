package operator_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/knative"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

var scheme = runtime.NewScheme()

// Classic mode is linked into this test binary: manager_test.go imports
// operator/classic. A binary without it refuses --mode=classic
// (internal/depcheck's TestClassicLinkedOnlyByImport).

func TestMain(m *testing.M) {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"../examples/configwatcher/config/crd"}, Scheme: scheme}))
}

const fin = "test.opzero.dev/cleanup"

// managerStyle is a reconciler as anyone writes it for a controller-runtime
// manager: client.Client, controllerutil finalizers with Update,
// Status().Update, a record.EventRecorder. Nothing in it knows opzero.
type managerStyle struct {
	client.Client
	Recorder record.EventRecorder
}

func (r *managerStyle) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !cw.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(cw, fin) {
			r.Recorder.Event(cw, corev1.EventTypeNormal, "CleanedUp", "released what "+cw.Name+" held")
			controllerutil.RemoveFinalizer(cw, fin)
			return reconcile.Result{}, r.Update(ctx, cw)
		}
		return reconcile.Result{}, nil
	}
	if controllerutil.AddFinalizer(cw, fin) {
		if err := r.Update(ctx, cw); err != nil {
			return reconcile.Result{}, err
		}
	}
	cw.Status.ObservedGeneration = cw.Generation
	return reconcile.Result{}, r.Status().Update(ctx, cw)
}

func TestManagerReconcilerRunsUnchangedInBothModes(t *testing.T) {
	for _, mode := range []operator.Mode{operator.Serverless, operator.Classic} {
		t.Run(string(mode), func(t *testing.T) {
			env := testenv.Get(t)
			ns := env.Namespace(t)
			addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)) // the runtime binds it itself
			rt, err := operator.New(operator.Options{Mode: mode, Scheme: scheme, Config: env.Config, Addr: addr, LeaderElectionNamespace: ns, InsecureNoAuth: true})
			if err != nil {
				t.Fatal(err)
			}
			r := &managerStyle{Client: rt.GetClient(), Recorder: rt.GetEventRecorderFor("manager-style")}
			if err := builder.ControllerManagedBy(rt).For(&v1.ConfigWatcher{}).Complete(r); err != nil {
				t.Fatal(err)
			}
			testkit.Background(t, rt.Start)
			if mode == operator.Serverless {
				startAdapter(t, env, ns, addr, rt)
			}
			exerciseFinalizers(t, env, ns)
		})
	}
}

// startAdapter feeds the serverless runtime from Knative's real
// ApiServerSource and waits until its watch delivers.
func startAdapter(t *testing.T, env *testenv.Env, ns, addr string, rt *operator.Runtime) {
	t.Helper()
	a, err := knative.StartApiServerSource(context.Background(), knative.ApiServerSourceConfig{
		Name: "test-" + ns, Namespaces: []string{ns}, Mode: "Resource", Sink: "http://" + addr, Kubeconfig: env.Kubeconfig,
		Resources: []knative.Resource{{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	canary := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "none", PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(context.Background(), canary); err != nil {
		t.Fatal(err)
	}
	i := 0
	testkit.Eventually(t, 30*time.Second, "the adapter's first delivery", func(ctx context.Context) (bool, error) {
		if operator.RequestsServed(rt) > 0 {
			return true, nil
		}
		i++
		canary.Labels = map[string]string{"poke": fmt.Sprint(i)}
		_ = env.Client.Update(ctx, canary)
		return false, nil
	})
}

func exerciseFinalizers(t *testing.T, env *testenv.Env, ns string) {
	c := env.Client
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "subject", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "a", PodSelector: map[string]string{"app": "x"}}}
	if err := c.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cw)
	testkit.Eventually(t, 30*time.Second, "finalizer added and generation 1 observed", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cw)
		return err == nil && controllerutil.ContainsFinalizer(cw, fin) && cw.Status.ObservedGeneration == 1, nil
	})
	cw.Spec.ConfigMap = "b"
	if err := c.Update(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "generation 2 observed", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cw)
		return err == nil && cw.Generation == 2 && cw.Status.ObservedGeneration == 2, nil
	})
	if err := c.Delete(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "cleanup, finalizer removed, object gone", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, key, &v1.ConfigWatcher{})), nil
	})
	evs := &corev1.EventList{}
	testkit.Eventually(t, 30*time.Second, "the CleanedUp Event", func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "CleanedUp" && e.InvolvedObject.Name == "subject" {
				return true, nil
			}
		}
		return false, nil
	})
}
