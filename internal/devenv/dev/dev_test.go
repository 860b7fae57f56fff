package dev_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/mountns"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

var cacheDir string

func TestMain(m *testing.M) {
	mountns.Main() // the helper of TestSecretVolumeAtItsMountPath's hook
	dir, err := os.MkdirTemp("", "opzero-dev-test-")
	if err != nil {
		panic(err)
	}
	cacheDir = dir
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	code := testenv.Main(m, testenv.Options{KnativeCRDs: true, CRDDirs: []string{"../../../examples/configwatcher/config/crd"}, Scheme: scheme})
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture reads the hand-written manifests into namespace ns, with the
// sweep moved to once a year so no tick lands in a test.
func fixture(t testing.TB, ns string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := dev.ReadManifests("testdata/configwatcher.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if o.GetKind() == "PingSource" {
			_ = unstructured.SetNestedField(o.Object, "0 0 1 1 *", "spec", "schedule")
		}
	}
	return objs
}

func start(t testing.TB, env *testenv.Env, objs []*unstructured.Unstructured, idle time.Duration) *dev.Platform {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, Idle: idle, Out: testkit.LogWriter(t)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pids := p.PIDs()
		cancel()
		p.Stop()
		for _, pid := range pids {
			if !gone(pid) {
				t.Errorf("pid %d still runs after Stop", pid)
			}
		}
		if t.Failed() {
			for _, f := range []string{"service-", "apiserversource-", "mtping"} {
				matches, _ := filepath.Glob(p.LogPath(f + "*"))
				for _, m := range matches {
					b, _ := os.ReadFile(m)
					t.Logf("%s:\n%s", m, testkit.Tail(b, 40))
				}
			}
		}
	})
	return p
}

// gone reports whether pid has exited (or is a zombie about to be reaped).
func gone(pid int) bool {
	return testkit.Wait(4*time.Second, func() bool { return proc.Dead(pid) })
}

// operatorProcesses counts live processes running the ConfigWatcher binary
// built for the ko:// image, by reading /proc (not the activator's books).
func operatorProcesses(t testing.TB) int {
	t.Helper()
	exes, _ := filepath.Glob(filepath.Join(cacheDir, "*configwatcher*"))
	if len(exes) != 1 {
		t.Fatalf("built binaries in the cache: %v, want one", exes)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	n := 0
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && target == exes[0] {
			if st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat")); err == nil {
				if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
					continue
				}
			}
			n++
		}
	}
	return n
}

func waitZero(t testing.TB, p *dev.Platform) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "scale to zero", func(context.Context) (bool, error) {
		return p.Services[0].Activator.Instances() == 0, nil
	})
	if n := operatorProcesses(t); n != 0 {
		t.Fatalf("%d operator processes after scale to zero, want 0", n)
	}
}

func createWebapp(t testing.TB, c client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config", Namespace: ns}, Data: map[string]string{"message": "Hello"}}
	labels := map[string]string{"app": "webapp"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "webapp", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "k8spatterns/mini-http-server"}}}}}}
	for _, o := range []client.Object{cm, d} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// livePods returns the UIDs of the webapp pods not being deleted.
func livePods(t testing.TB, c client.Client, ns string) map[types.UID]bool {
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

func condReady(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func get(t testing.TB, c client.Client, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// generated returns `opzero manifests` of the ConfigWatcher for namespace
// ns (the default wiring: the hub), with the sweeps moved to once a year
// so no tick lands in a test.
func generated(t testing.TB, ns string) []*unstructured.Unstructured {
	t.Helper()
	return generatedWith(t, ns, "")
}

// generatedKnative is generated with --source=knative.
func generatedKnative(t testing.TB, ns string) []*unstructured.Unstructured {
	t.Helper()
	return generatedWith(t, ns, manifests.SourceKnative)
}

func generatedWith(t testing.TB, ns, source string) []*unstructured.Unstructured {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Build(context.Background(), root, "./examples/configwatcher", manifests.Options{Namespace: ns, Source: source})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		switch o.GetKind() {
		case "PingSource":
			_ = unstructured.SetNestedField(o.Object, "0 0 1 1 *", "spec", "schedule")
		case "Subscription":
			sweeps, _, _ := unstructured.NestedSlice(o.Object, "spec", "sweeps")
			for _, sw := range sweeps {
				sw.(map[string]any)["schedule"] = "0 0 1 1 *"
			}
			_ = unstructured.SetNestedSlice(o.Object, sweeps, "spec", "sweeps")
		}
	}
	return out
}

// TestConfigWatcherThroughDev is the end-to-end path, with the
// hand-written manifests and with those of `opzero manifests`: the default
// (a Subscription, the hub as a process) and --source=knative (two
// ApiServerSources, PingSources, the wakeup source as a process): 0
// operator processes while idle; a ConfigMap change starts one, the pods
// restart, the count returns to 0; a burst of events during a cold start is
// all delivered and reconciled.
func TestConfigWatcherThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and Knative's adapters")
	}
	for _, tc := range []struct {
		name    string
		objects func(testing.TB, string) []*unstructured.Unstructured
	}{{"hand-written", fixture}, {"opzero-manifests", generated}, {"opzero-manifests-knative", generatedKnative}} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Get(t)
			ns := env.Namespace(t)
			exercise(t, env, ns, tc.objects(t, ns))
		})
	}
}

func exercise(t *testing.T, env *testenv.Env, ns string, objs []*unstructured.Unstructured) {
	c := env.Client
	ctx := context.Background()
	createWebapp(t, c, ns)
	p := start(t, env, objs, time.Second)

	// The statuses Knative's controllers would write.
	svc := p.Services[0]
	ks := get(t, c, "serving.knative.dev/v1", "Service", ns, "configwatcher")
	if url, _, _ := unstructured.NestedString(ks.Object, "status", "url"); url != svc.URL || !condReady(ks) {
		t.Fatalf("Service status url %q ready %v, want %q and Ready", url, condReady(ks), svc.URL)
	}
	for _, o := range objs {
		if o.GetKind() != "ApiServerSource" && o.GetKind() != "PingSource" {
			continue
		}
		src := get(t, c, o.GetAPIVersion(), o.GetKind(), ns, o.GetName())
		sinkURI, _, _ := unstructured.NestedString(src.Object, "status", "sinkUri")
		if sinkURI != svc.URL || !condReady(src) {
			t.Fatalf("%s %s status sinkUri %q ready %v, want %q and Ready", o.GetKind(), o.GetName(), sinkURI, condReady(src), svc.URL)
		}
	}
	if n := operatorProcesses(t); n != 0 || svc.Activator.Instances() != 0 {
		t.Fatalf("%d operator processes, %d instances while idle; want 0", n, svc.Activator.Instances())
	}

	// First sight: the ConfigWatcher's add event starts the operator.
	testkit.Eventually(t, 20*time.Second, "webapp pods", func(context.Context) (bool, error) { return len(livePods(t, c, ns)) == 2, nil })
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config-watcher", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}}
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "ConfigWatcher reconciled", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(cw), cw) == nil && cw.Status.ConfigMapVersion != "", nil
	})
	waitZero(t, p)

	// A ConfigMap change: a second cold start, the pods are restarted.
	before := livePods(t, c, ns)
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webapp-config"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["message"] = "Hello, opzero dev"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "an operator process after the change", func(context.Context) (bool, error) {
		return operatorProcesses(t) == 1, nil
	})
	testkit.Eventually(t, 30*time.Second, "pods restarted", func(context.Context) (bool, error) {
		now := livePods(t, c, ns)
		for uid := range now {
			if before[uid] {
				return false, nil
			}
		}
		return len(now) == 2, nil
	})
	testkit.Eventually(t, 10*time.Second, "status.restarts 1", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(cw), cw) == nil && cw.Status.Restarts == 1, nil
	})
	waitZero(t, p)
	if got := svc.Activator.ColdStarts.Load(); got != 2 {
		t.Fatalf("cold starts %d, want 2", got)
	}

	// No event is lost during a cold start: a burst at zero instances.
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("burst-%d", i)
			if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
				t.Error(err)
			}
			if err := c.Create(ctx, &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: v1.ConfigWatcherSpec{ConfigMap: name, PodSelector: map[string]string{"app": name}}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	testkit.Eventually(t, 30*time.Second, "every burst ConfigWatcher reconciled", func(ctx context.Context) (bool, error) {
		for i := range n {
			w := &v1.ConfigWatcher{}
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("burst-%d", i)}, w) != nil || w.Status.ConfigMapVersion == "" {
				return false, nil
			}
		}
		return true, nil
	})
	waitZero(t, p)
	if got := svc.Activator.ColdStarts.Load(); got != 3 {
		t.Errorf("cold starts %d, want 3 (one for the whole burst)", got)
	}
	added := map[string]bool{}
	for _, d := range svc.Deliveries() {
		if d.Code != 200 {
			t.Errorf("delivery %s %s/%s answered %d %s", d.Type, d.Kind, d.Name, d.Code, d.Result)
		}
		if strings.HasSuffix(d.Type, ".add") {
			added[d.Kind+"/"+d.Name] = true
		}
	}
	// Every add event of the burst reached the operator; with the hub, a
	// ConfigMap's only if a ConfigWatcher named it when it was created
	// (referencedBy): each was created before the ConfigWatcher naming it,
	// whose own add reconciles it.
	kinds := []string{"ConfigMap", "ConfigWatcher"}
	if referencedBy(objs, "ConfigMap") {
		kinds = kinds[1:]
	}
	for i := range n {
		for _, kind := range kinds {
			if k := fmt.Sprintf("%s/burst-%d", kind, i); !added[k] {
				t.Errorf("no add event delivered for %s", k)
			}
		}
	}
	if svc.Failures.Load() != 0 || svc.Reconciles.Load() < n+2 {
		t.Errorf("%s: want no failures and at least %d reconciles", p.StatusLine(), n+2)
	}
	for _, o := range objs {
		wakeups, _, _ := unstructured.NestedBool(o.Object, "spec", "wakeups")
		if o.GetKind() == "Deployment" && strings.Contains(o.GetName(), "wakeup-source") || o.GetKind() == "Subscription" && wakeups {
			wakeupThroughDev(t, c, p, ns)
		}
	}
	t.Log(p.StatusLine())
}

// referencedBy: a Subscription among objs takes kind only as referenced
// by a field of its primaries (the hub filters the others out).
func referencedBy(objs []*unstructured.Unstructured, kind string) bool {
	for _, o := range objs {
		if o.GetKind() != "Subscription" {
			continue
		}
		res, _, _ := unstructured.NestedSlice(o.Object, "spec", "resources")
		for _, r := range res {
			if m := r.(map[string]any); m["kind"] == kind && m["referencedBy"] != nil {
				return true
			}
		}
	}
	return false
}

// wakeupThroughDev: a due Wakeup record is delivered by the wakeup source
// or the hub (a process running as its generated service account) to the operator at
// zero instances, which starts, answers 200, and the record is deleted.
func wakeupThroughDev(t *testing.T, c client.Client, p *dev.Platform, ns string) {
	svc := p.Services[0]
	cold := svc.Activator.ColdStarts.Load()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "opzero.dev/v1alpha1", "kind": "Wakeup",
		"metadata": map[string]any{"name": "configwatcher-test", "namespace": ns,
			"labels": map[string]any{"opzero.dev/operator": "configwatcher"}}, // as wakeup.Store writes it
		"spec": map[string]any{"operator": "configwatcher", "sink": svc.URL, "reason": "RequeueAfter",
			"due":    time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
			"target": map[string]any{"apiVersion": "k8spatterns.io/v1", "kind": "ConfigWatcher", "namespace": ns, "name": "webapp-config-watcher"}},
	}}
	if err := c.Create(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the Wakeup delivered and deleted", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(w), w.DeepCopy())
		return apierrors.IsNotFound(err), nil
	})
	delivered := false
	for _, d := range svc.Deliveries() {
		if d.Type == "dev.opzero.wakeup" {
			delivered = d.Code == 200
		}
	}
	if !delivered || svc.Activator.ColdStarts.Load() != cold+1 {
		t.Fatalf("wakeup delivered with 200: %v; cold starts %d -> %d, want one more", delivered, cold, svc.Activator.ColdStarts.Load())
	}
	waitZero(t, p)
}

// TestPingSourceThroughDev: mtping, fed by the statuses opzero dev writes,
// sends a sweep to the activator with an OIDC token; it is answered 200.
func TestPingSourceThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and Knative's adapters")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	objs := fixture(t, ns)
	for _, o := range objs {
		if o.GetKind() == "PingSource" {
			_ = unstructured.SetNestedField(o.Object, "*/2 * * * * *", "spec", "schedule")
		}
	}
	p := start(t, env, objs, 500*time.Millisecond)
	testkit.Eventually(t, 30*time.Second, "a PingSource delivery", func(context.Context) (bool, error) {
		for _, d := range p.Services[0].Deliveries() {
			if d.Type == "dev.knative.sources.ping" {
				if d.Code != 200 {
					return false, fmt.Errorf("ping answered %d %s", d.Code, d.Result)
				}
				return true, nil
			}
		}
		return false, nil
	})
}
