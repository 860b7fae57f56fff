package operator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
	"github.com/opzero/opzero/testenv"
)

// counter is a controller of its own kind that counts reconciles per name.
type counter struct {
	mu    sync.Mutex
	count map[string]int
}

func (c *counter) Reconcile(_ context.Context, req ctrl.Request) (ctrl.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count[req.Name]++
	return ctrl.Result{}, nil
}

func (c *counter) reconciles(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[name]
}

// TestAdoptedControllersServerless: a project whose main sets up three
// controllers (ConfigWatchers, which also owns ConfigMaps and watches
// Secrets and ServiceAccounts; Secrets; ServiceAccounts) runs them all in
// one serverless process on one endpoint, each event reaching the
// controllers whose sources watch its kind, and is described with all
// three.
func TestAdoptedControllersServerless(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	mgr, err := classic.NewManager(operator.Options{Addr: addr, InsecureNoAuth: true}, env.Config, manager.Options{Scheme: scheme, Metrics: metricsOff})
	if err != nil {
		t.Fatal(err)
	}
	cws := &kubebuilderStyle{Client: mgr.GetClient(), count: map[string]int{}}
	secrets, accounts := &counter{count: map[string]int{}}, &counter{count: map[string]int{}}
	if err := cws.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Secret{}).Named("secrets").Complete(secrets); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.ServiceAccount{}).Named("accounts").Complete(accounts); err != nil {
		t.Fatal(err)
	}
	startManager(t, mgr)
	url := "http://" + addr
	testkit.Eventually(t, 30*time.Second, "listening", func(ctx context.Context) (bool, error) { return get(ctx, url+"/healthz") == 200, nil })

	want := map[string]int{}
	check := func(what string) {
		t.Helper()
		got := map[string]int{"cw a": cws.reconciles("a"), "secret s": secrets.reconciles("s"), "account sa": accounts.reconciles("sa")}
		for k, n := range got {
			if n != want[k] {
				t.Fatalf("%s: reconciles %v, want %v", what, got, want)
			}
		}
	}
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "one", PodSelector: map[string]string{"app": "x"}}}
	if err := env.Client.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, cw, "configwatchers")
	want["cw a"]++
	check("a ConfigWatcher (one controller)")
	owned := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-owned"}, owned); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Update, owned, "configmaps")
	want["cw a"]++
	check("its owned ConfigMap (the ConfigWatcher controller's Owns)")

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns, Labels: map[string]string{"watcher": "a"}}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, sec, "secrets")
	want["cw a"]++
	want["secret s"]++
	check("a labelled Secret (the Secret controller's For, the ConfigWatcher controller's Watches)")

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: ns}}
	if err := controllerutil.SetOwnerReference(cw, sa, scheme); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	post(t, url, cloudevent.Add, sa, "serviceaccounts")
	want["cw a"]++
	want["account sa"]++
	check("a ServiceAccount owned by the ConfigWatcher (its owner's Watches, the ServiceAccount controller's For)")
}

// startManager starts m until the test ends.
func startManager(t *testing.T, m manager.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start returned %v after cancel, want nil", err)
		}
	})
}
