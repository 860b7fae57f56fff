package manifests_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/examples/configwatcher/controller"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	_ "github.com/opzero/opzero/operator/classic" // links --mode=classic
	"github.com/opzero/opzero/testenv"
)

// TestClassicRunsOnTheGeneratedRBAC runs the ConfigWatcher operator in
// classic mode (controller-runtime manager: informers, leader election) as
// the generated service account, as its main does, and waits for a
// ConfigMap change to restart the selected pods.
func TestClassicRunsOnTheGeneratedRBAC(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	applyRBAC(t, env, generate(t, manifests.Options{Mode: manifests.Classic, Namespace: ns}))
	appNS := env.Namespace(t)

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":configwatcher",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	rt, err := operator.New(operator.Options{Mode: operator.Classic, Config: cfg, Scheme: env.Scheme, LeaderElectionNamespace: ns,
		Logger: bufferedLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	r := &controller.ConfigWatcherReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("configwatcher")}
	if err := builder.ControllerManagedBy(rt).Named("configwatcher").For(&v1.ConfigWatcher{}).
		Watches(&corev1.ConfigMap{}, controller.ConfigMapToConfigWatchers).Complete(r); err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, rt.Start)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: appNS}, Data: map[string]string{"k": "1"}}
	mustCreate(t, env, cm)
	mustCreate(t, env, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: appNS, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}})
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "cw", Namespace: appNS},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "app-config", PodSelector: map[string]string{"app": "web"}}}
	mustCreate(t, env, cw)
	testkit.Eventually(t, 30*time.Second, "the first reconcile records the ConfigMap", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw)
		return err == nil && cw.Status.ConfigMapVersion != "", err
	})
	cm.Data["k"] = "2"
	if err := env.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the change restarts the pod", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw)
		return err == nil && cw.Status.Restarts == 1, err
	})
}

// bufferedLog keeps the operator's log and shows it if the test failed
// (the manager may still log while it stops, after the test's own end).
func bufferedLog(t *testing.T) logr.Logger {
	var mu sync.Mutex
	var b strings.Builder
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the operator's log:\n%s", b.String())
		}
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&b, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1})
}
