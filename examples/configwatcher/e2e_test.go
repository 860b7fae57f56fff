package main_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/knative"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

var operatorBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "configwatcher-e2e-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	operatorBin = filepath.Join(dir, "configwatcher")
	if flag.Parse(); testing.Short() { // every test needs the control plane: testenv.Get skips them
		return testenv.Main(m, testenv.Options{})
	}
	// -tags opzero_classic: both modes (classic.go links classic mode)
	if out, err := exec.Command("go", "build", "-tags", "opzero_classic", "-o", operatorBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the operator: %v\n%s", err, out)
		return 1
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	return testenv.Main(m, testenv.Options{CRDDirs: []string{"config/crd", "../../config/crd/opzero.dev_wakeups.yaml"}, Scheme: scheme, KnativeCRDs: true}) // Knative's for TestSwitchingWiring
}

// startOperator runs the configwatcher binary in mode on a free port
// (another if the port was taken meanwhile) and returns once it is ready
// (serverless: /healthz answers; classic: the process runs). When the test
// ends it stops the operator with SIGINT and expects exit status 0.
func startOperator(t *testing.T, env *testenv.Env, mode string, args ...string) (port int) {
	t.Helper()
	var op *testkit.Child
	port = testkit.OnFreePort(t, func(port int) (err error) {
		cmd := exec.Command(operatorBin, append([]string{"--mode=" + mode}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, fmt.Sprintf("PORT=%d", port))
		ready := ""
		if mode == "serverless" {
			ready = fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
		}
		op, err = testkit.StartChild(t, cmd, ready, 20*time.Second)
		return err
	})
	t.Cleanup(func() {
		if err := op.Interrupt(); err != nil {
			t.Errorf("operator exit after SIGINT: %v (want 0)", err)
		}
	})
	return port
}

// delivery is one event the adapter delivered, as the operator answered it.
type delivery struct {
	typ, kind, name, result string
	code                    int
}

// recorder is a reverse proxy between the adapter and the operator that
// records every delivery.
type recorder struct {
	mu   sync.Mutex
	seen []delivery
}

func (r *recorder) start(t *testing.T, target int) string {
	u, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", target))
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(resp *http.Response) error {
		h := resp.Request.Header
		r.mu.Lock()
		r.seen = append(r.seen, delivery{h.Get("Ce-Type"), h.Get("Ce-Kind"), h.Get("Ce-Name"), resp.Header.Get("Opzero-Result"), resp.StatusCode})
		r.mu.Unlock()
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

func (r *recorder) find(f func(delivery) bool) (delivery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.seen {
		if f(d) {
			return d, true
		}
	}
	return delivery{}, false
}

func createWebapp(t *testing.T, c client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	sel := map[string]string{"app": "webapp"}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config", Namespace: ns}, Data: map[string]string{"message": "Hello, World"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "webapp", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "webapp", Image: "k8spatterns/mini-http-server"}}}},
		}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

func podUIDs(t *testing.T, c client.Client, ns string) map[types.UID]bool {
	t.Helper()
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app": "webapp"}); err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.UID] = true
		}
	}
	return out
}

// exercise is the scenario both modes must pass: the book's ConfigWatcher,
// a first reconcile that only records the ConfigMap, an edit of the
// ConfigMap that restarts the pods, status and an Event.
func exercise(t *testing.T, env *testenv.Env, ns string) {
	ctx := context.Background()
	c := env.Client
	var before map[types.UID]bool
	testkit.Eventually(t, 30*time.Second, "2 webapp pods", func(context.Context) (bool, error) {
		before = podUIDs(t, c, ns)
		return len(before) == 2, nil
	})
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config-watcher", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}}
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cw)
	testkit.Eventually(t, 20*time.Second, "ConfigWatcher Ready with the ConfigMap recorded", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, cw); err != nil {
			return false, err
		}
		return cw.Status.ConfigMapVersion != "" && cw.Status.ObservedGeneration == cw.Generation, nil
	})
	if cw.Status.Restarts != 0 || len(podUIDs(t, c, ns)) != 2 {
		t.Fatalf("first reconcile restarted pods (restarts=%d); it should only record the ConfigMap", cw.Status.Restarts)
	}

	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webapp-config"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["message"] = "Hello, opzero"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "pods restarted after the ConfigMap change", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, cw); err != nil {
			return false, err
		}
		now := podUIDs(t, c, ns)
		for uid := range before {
			if now[uid] {
				return false, nil
			}
		}
		return cw.Status.Restarts == 1 && len(now) == 2, nil
	})
	if cw.Status.LastRestartTime == nil || cw.Status.ConfigMapVersion != cm.ResourceVersion {
		t.Fatalf("status after restart: %+v, want lastRestartTime and configMapVersion %s", cw.Status, cm.ResourceVersion)
	}
	events := &eventsv1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events.Items {
		found = found || (e.Reason == "Restarted" && e.Regarding.Name == cw.Name && strings.Contains(e.Note, "restarted 2 pod(s)"))
	}
	if !found {
		t.Fatalf("no Restarted Event for %s among %d events", cw.Name, len(events.Items))
	}
}

func TestServerlessWithTheRealApiServerSource(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWebapp(t, env.Client, ns)
	// The adapter authenticates as Knative's OIDC feature does: a token for
	// its own service account with the operator's audience.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "configwatcher-source", Namespace: ns}}
	if err := env.Client.Create(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	port := startOperator(t, env, "serverless", "--audience=configwatcher",
		"--allowed-senders=system:serviceaccount:"+ns+":configwatcher-source")
	rec := &recorder{}
	sink := rec.start(t, port)
	adapter, err := knative.StartApiServerSource(context.Background(), knative.ApiServerSourceConfig{
		Audience: "configwatcher", OIDCServiceAccount: sa.Name,
		Name: "configwatcher-" + ns, Namespaces: []string{ns}, Mode: "Resource", Sink: sink, Kubeconfig: env.Kubeconfig,
		Resources: []knative.Resource{
			{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers"},
			{Version: "v1", Resource: "configmaps"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adapter.Stop)
	// The adapter sends nothing for objects that exist when it starts:
	// wait until its watch delivers a canary before the scenario.
	canary := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns}}
	testkit.Eventually(t, 20*time.Second, "the adapter's watch", func(ctx context.Context) (bool, error) {
		canary.ResourceVersion = ""
		canary.Data = map[string]string{"t": time.Now().String()}
		if err := env.Client.Create(ctx, canary); err != nil {
			_ = env.Client.Update(ctx, canary)
		}
		_, ok := rec.find(func(d delivery) bool { return d.name == "canary" })
		return ok, nil
	})

	exercise(t, env, ns)

	// The reconcile wrote the status before the operator answered; give the
	// answer a moment to travel back through the recording proxy.
	var d delivery
	testkit.Eventually(t, 10*time.Second, "the answered delivery of the ConfigMap change", func(context.Context) (bool, error) {
		var ok bool
		d, ok = rec.find(func(d delivery) bool { return d.kind == "ConfigMap" && d.name == "webapp-config" && d.code == 200 })
		return ok, nil
	})
	if !strings.HasPrefix(d.typ, "dev.knative.apiserver.resource.") {
		t.Fatalf("delivery type %q, want an ApiServerSource Resource-mode event", d.typ)
	}
	testkit.Eventually(t, 10*time.Second, "a skipped status update of the ConfigWatcher", func(context.Context) (bool, error) {
		_, ok := rec.find(func(d delivery) bool { return d.kind == "ConfigWatcher" && strings.HasPrefix(d.result, "skipped") })
		return ok, nil
	})
	if bad, ok := rec.find(func(d delivery) bool { return d.code != 200 }); ok {
		t.Fatalf("a delivery was not answered 200: %+v", bad)
	}
}

func TestClassic(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWebapp(t, env.Client, ns)
	startOperator(t, env, "classic", "--leader-election-namespace="+ns)
	exercise(t, env, ns)
}
