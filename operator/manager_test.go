package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opzero/opzero/internal/testkit"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
	"github.com/opzero/opzero/testenv"
)

// kubebuilderStyle is a controller as a kubebuilder project has it: its
// own SetupWithManager on ctrl.Manager, controller-runtime's builder,
// handlers and predicates. Nothing in it knows opzero. It makes an owned
// ConfigMap per ConfigWatcher and counts reconciles per key.
type kubebuilderStyle struct {
	client.Client
	mu    sync.Mutex
	count map[string]int
	// external, if set, is a channel source (WatchesRawSource): requests
	// from outside any Kubernetes event.
	external chan event.GenericEvent
}

func (r *kubebuilderStyle) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.mu.Lock()
	r.count[req.Name]++
	r.mu.Unlock()
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cw.Name + "-owned", Namespace: cw.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Data = map[string]string{"configMap": cw.Spec.ConfigMap}
		return controllerutil.SetControllerReference(cw, cm, r.Scheme())
	})
	return ctrl.Result{}, err
}

func (r *kubebuilderStyle) reconciles(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[name]
}

func (r *kubebuilderStyle) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if r.external != nil {
		b = b.WatchesRawSource(source.Channel(r.external, &handler.EnqueueRequestForObject{}))
	}
	return b.
		For(&v1.ConfigWatcher{}, crbuilder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if t := o.GetLabels()["watcher"]; t != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: t}}}
			}
			return nil
		})).
		Watches(&corev1.ServiceAccount{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1.ConfigWatcher{})).
		Watches(&v1.ConfigWatcher{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if t := o.GetLabels()["also"]; t != "" { // a ConfigWatcher that asks for another's reconcile
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: t}}}
			}
			return nil
		})).
		Named("kubebuilder-style").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)}).
		Complete(r)
}

func TestAdoptedControllerServerless(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	probeAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	// The project's own flags (kubebuilder's --leader-elect,
	// --health-probe-bind-address, --metrics-bind-address) are honoured:
	// leader election is not needed, the probes and metrics are served
	// where they say.
	mgr, err := classic.NewManager(operator.Options{Addr: addr, InsecureNoAuth: true}, env.Config,
		manager.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: metricsAddr}, LeaderElection: true, HealthProbeBindAddress: probeAddr})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.AddMetricsServerExtraHandler("/debug/extra", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})); err != nil {
		t.Fatal(err)
	}
	r := &kubebuilderStyle{Client: mgr.GetClient(), count: map[string]int{}, external: make(chan event.GenericEvent, 1)}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	if err := mgr.AddReadyzCheck("toggle", func(*http.Request) error {
		if !ready.Load() {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		t.Fatal(err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.ConfigWatcher{}, "spec.configMap", func(o client.Object) []string {
		return []string{o.(*v1.ConfigWatcher).Spec.ConfigMap}
	}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { close(ran); <-ctx.Done(); return nil })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start returned %v after cancel, want nil", err)
		}
	})
	<-ran
	url := "http://" + addr
	testkit.Eventually(t, 30*time.Second, "listening and /readyz failing its check", func(ctx context.Context) (bool, error) {
		return get(ctx, url+"/readyz") == http.StatusInternalServerError, nil
	})
	ready.Store(true)
	if c := get(ctx, url+"/readyz"); c != http.StatusOK {
		t.Fatalf("/readyz = %d after the check passes, want 200", c)
	}
	if c := get(ctx, url+"/healthz/ping"); c != http.StatusOK {
		t.Fatalf("/healthz/ping = %d, want 200", c)
	}
	for _, p := range []string{"/readyz", "/readyz/toggle", "/healthz", "/healthz/ping"} {
		if c := get(ctx, "http://"+probeAddr+p); c != http.StatusOK {
			t.Fatalf("%s on the health probe address = %d, want 200", p, c)
		}
	}
	testkit.Eventually(t, 30*time.Second, "controller-runtime's metrics server on its own address, with the extra handler", func(ctx context.Context) (bool, error) {
		return get(ctx, "http://"+metricsAddr+"/metrics") == http.StatusOK && get(ctx, "http://"+metricsAddr+"/debug/extra") == http.StatusTeapot, nil
	})

	c := env.Client
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "one", PodSelector: map[string]string{"app": "x"}}}
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, cw, "configwatchers")
	owned := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-owned"}, owned); err != nil {
		t.Fatalf("the add was answered but the owned ConfigMap is missing: %v", err)
	}
	want := 1
	check := func(what string) {
		t.Helper()
		if got := r.reconciles("a"); got != want {
			t.Fatalf("%s: %d reconciles of a, want %d", what, got, want)
		}
	}
	check("create")

	// A label change keeps the generation: GenerationChangedPredicate drops it.
	cw.Labels = map[string]string{"touched": "yes"}
	if err := c.Update(ctx, cw); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Update, cw, "configwatchers")
	check("label-only update (GenerationChangedPredicate)")

	cw.Spec.ConfigMap = "two"
	if err := c.Update(ctx, cw); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Update, cw, "configwatchers")
	want++
	check("spec update")
	if err := c.Get(ctx, client.ObjectKeyFromObject(owned), owned); err != nil || owned.Data["configMap"] != "two" {
		t.Fatalf("owned ConfigMap %v, %v: want data configMap=two", owned.Data, err)
	}

	// Owns: an event of the owned ConfigMap reconciles its owner.
	post(t, url, cloudevent.Update, owned, "configmaps")
	want++
	check("owned ConfigMap update")

	// Watches + EnqueueRequestsFromMapFunc.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns, Labels: map[string]string{"watcher": "a"}}}
	if err := c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, sec, "secrets")
	want++
	check("labelled Secret")
	unlabelled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "u", Namespace: ns}}
	if err := c.Create(ctx, unlabelled); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, unlabelled, "secrets")
	check("unlabelled Secret")

	// Watches + EnqueueRequestForOwner (any owner, not only the controller).
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: ns}}
	if err := controllerutil.SetOwnerReference(cw, sa, scheme); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, sa, "serviceaccounts")
	want++
	check("ServiceAccount with a non-controller owner reference")

	// An update of an object this instance never saw (a cold start) is a
	// create in the initial list: the predicate cannot compare, so it passes.
	b := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "one", PodSelector: map[string]string{"app": "x"}}}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Labels = map[string]string{"touched": "yes"}
	if err := c.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Update, b, "configwatchers")
	if got := r.reconciles("b"); got != 1 {
		t.Fatalf("first event of b was an update: %d reconciles, want 1 (delivered as a create)", got)
	}

	// A field index: the API server knows no spec.configMap selector; the
	// client lists without it and filters with the index function, while
	// metadata.name still goes to the API server.
	for _, tc := range []struct {
		sel  client.MatchingFields
		want string
	}{
		{client.MatchingFields{"spec.configMap": "one"}, "b"},
		{client.MatchingFields{"spec.configMap": "two"}, "a"},
		{client.MatchingFields{"spec.configMap": "one", "metadata.name": "a"}, ""},
	} {
		list := &v1.ConfigWatcherList{}
		if err := mgr.GetClient().List(ctx, list, client.InNamespace(ns), tc.sel); err != nil {
			t.Fatalf("List %v: %v", tc.sel, err)
		}
		var names []string
		for _, it := range list.Items {
			names = append(names, it.Name)
		}
		if got := strings.Join(names, ","); got != tc.want {
			t.Fatalf("List %v = [%s], want [%s]", tc.sel, got, tc.want)
		}
	}

	// A handler of the For kind that asks for another key: a's own update
	// is dropped by the predicate, b is reconciled (after the answer).
	cw.Labels = map[string]string{"also": "b"}
	if err := c.Update(ctx, cw); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Update, cw, "configwatchers")
	testkit.Eventually(t, 30*time.Second, "b reconciled for a's handler", func(context.Context) (bool, error) { return r.reconciles("b") == 2, nil })
	check("a's label-only update that maps to b")

	// A raw source (a channel) adds outside any CloudEvent: reconciled too.
	r.external <- event.GenericEvent{Object: &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "from-channel", Namespace: ns}}}
	testkit.Eventually(t, 30*time.Second, "a request from a channel source reconciled", func(context.Context) (bool, error) { return r.reconciles("from-channel") == 1, nil })
}

// post sends obj's Resource-mode event and requires a 200 answer, which
// the engine gives after the reconciles the event caused have finished.
func post(t *testing.T, url string, action cloudevent.Action, obj client.Object, plural string) {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, action, body, plural)
	if err != nil {
		t.Fatal(err)
	}
	req, err := cloudevent.NewRequest(context.Background(), url, ev, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s %s: HTTP %d (%s)", gvk.Kind, action, obj.GetName(), resp.StatusCode, resp.Header.Get(serverless.ResultHeader))
	}
}

func get(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdoptedControllerClassic: classic mode is controller-runtime's own
// manager, informers and all.
func TestAdoptedControllerClassic(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	mgr, err := classic.NewManager(operator.Options{Mode: operator.Classic}, env.Config, manager.Options{Scheme: scheme,
		Metrics: metricsOff, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	r := &kubebuilderStyle{Client: mgr.GetClient(), count: map[string]int{}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := env.Client
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "one", PodSelector: map[string]string{"app": "x"}}}
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "owned ConfigMap", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-owned"}, &corev1.ConfigMap{})
		return err == nil, client.IgnoreNotFound(err)
	})
	before := r.reconciles("a")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns, Labels: map[string]string{"watcher": "a"}}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "a reconcile from the labelled Secret", func(context.Context) (bool, error) { return r.reconciles("a") > before, nil })
}

// TestAdoptedManagerRefusesWhatCannotWorkServerless: each refusal comes
// from Start, with the reason; so does a Runnable's failure, which stops
// the serving.
func TestAdoptedManagerRefusesWhatCannotWorkServerless(t *testing.T) {
	env := testenv.Get(t)
	for _, tc := range []struct {
		name  string
		mo    manager.Options
		setup func(manager.Manager)
		want  string
	}{
		{"failing runnable", manager.Options{}, func(m manager.Manager) {
			_ = m.Add(manager.RunnableFunc(func(context.Context) error { return errors.New("boom") }))
		}, "boom"},
		{"two controllers of one name", manager.Options{}, func(m manager.Manager) {
			_ = (&kubebuilderStyle{count: map[string]int{}}).SetupWithManager(m)
		}, "two operators named kubebuilder-style"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.mo.Scheme = scheme
			mgr, err := classic.NewManager(operator.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)), InsecureNoAuth: true}, env.Config, tc.mo)
			if err != nil {
				t.Fatal(err)
			}
			if err := (&kubebuilderStyle{Client: mgr.GetClient(), count: map[string]int{}}).SetupWithManager(mgr); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(mgr)
			}
			err = mgr.Start(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestAdoptedControllerDescribes: OPZERO_DESCRIBE describes the adopted
// controller, so `opzero manifests` derives its sources and RBAC from it.
func TestAdoptedControllerDescribes(t *testing.T) {
	for _, mode := range []operator.Mode{operator.Serverless, operator.Classic} {
		t.Run(string(mode), func(t *testing.T) { describes(t, mode) })
	}
}

func describes(t *testing.T, mode operator.Mode) {
	out := filepath.Join(t.TempDir(), "d.json")
	t.Setenv(description.Env, out)
	cfg := testenv.Get(t).Config
	// Leader election (the classic Deployment's) is no reason to refuse a
	// classic description.
	mgr, err := classic.NewManager(operator.Options{Mode: mode}, cfg, manager.Options{Scheme: scheme, LeaderElection: mode == operator.Classic})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&kubebuilderStyle{Client: mgr.GetClient(), count: map[string]int{}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
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
	if len(d.Operators) != 1 || d.Mode != string(mode) {
		t.Fatalf("described %d operators in mode %q, want 1 in %s", len(d.Operators), d.Mode, mode)
	}
	op := d.Operators[0]
	kinds := func(ks []description.Kind) string {
		var s []string
		for _, k := range ks {
			s = append(s, k.Kind)
		}
		return strings.Join(s, ",")
	}
	got := fmt.Sprintf("%s %s owned=%s watched=%s %s", op.Name, op.Primary.Kind, kinds(op.Owned), kinds(op.Watched), op.ReconcilerPackage)
	want := "kubebuilder-style ConfigWatcher owned=ConfigMap watched=Secret,ServiceAccount github.com/opzero/opzero/operator_test"
	if got != want {
		t.Fatalf("described %q, want %q", got, want)
	}
}

var metricsOff = metricsserver.Options{BindAddress: "0"}
