package dev_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/testkit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// convergeBound is how long 20 ConfigWatchers applied right after an API
// server restart may take to converge. Its parts: a reflector that had to
// list again does so after client-go's backoff (at most 30 s, 60 s with
// jitter), dev then restarts the adapter and sends the sweep tick (a few
// seconds), and the operator's cold start and reconciles (seconds).
const convergeBound = 90 * time.Second

// outage is how long kube-apiserver stays dead, as in the hand test.
const outage = 8 * time.Second

// TestAPIServerRestartThroughDev is issue 18's hand test, automated: a
// control plane of its own, the ConfigWatcher serverless through opzero
// dev with Knative's real ApiServerSource adapter (ConfigWatchers and
// ConfigMaps) and the sweep PingSource; kube-apiserver killed with SIGKILL
// and restarted 8 s later with the same arguments; then 20 ConfigMaps and
// 20 ConfigWatchers applied at once: all 20 converge within convergeBound.
func TestAPIServerRestartThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane of its own and kills its API server")
	}
	ctx := context.Background()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(t.TempDir(), "plane"), DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })
	crds, err := (pinned.Resolver{}).CRDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, append(crds, "../../../examples/configwatcher/config/crd")...); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	c, err := client.New(plane.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := "faults"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := dev.Start(pctx, dev.Options{Kubeconfig: plane.Kubeconfig, Objects: fixture(t, ns), Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, Idle: 3 * time.Second, Out: testkit.LogWriter(t), Events: dev.NewEventWriter(buf)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	// Warm up: one ConfigMap and ConfigWatcher through the whole path, so
	// both of the adapter's watches have delivered events when the API
	// server dies (a watch that ends within a second with nothing received
	// is a different failure, "very short watch" at once).
	create := func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-config", Namespace: ns}, Data: map[string]string{"message": "hello"}}
		cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: name + "-watcher", Namespace: ns},
			Spec: v1.ConfigWatcherSpec{ConfigMap: name + "-config", PodSelector: map[string]string{"app": name}}}
		for _, o := range []client.Object{cm, cw} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	create("warmup")
	testkit.Eventually(t, time.Minute, "the warm-up ConfigWatcher reconciled", func(ctx context.Context) (bool, error) {
		cw := &v1.ConfigWatcher{}
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "warmup-watcher"}, cw) == nil && cw.Status.ConfigMapVersion != "", nil
	})

	if err := plane.Kill("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage) // the fault's length, not a wait for an event
	if err := plane.Restart(ctx, "kube-apiserver", true); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	const n = 20
	for i := range n {
		create(fmt.Sprintf("app-%02d", i))
	}
	converged := 0
	err = pollUntil(convergeBound, func() bool {
		list := &v1.ConfigWatcherList{}
		if c.List(ctx, list, client.InNamespace(ns)) != nil {
			return false
		}
		converged = 0
		for _, cw := range list.Items {
			if cw.Name != "warmup-watcher" && cw.Status.ConfigMapVersion != "" {
				converged++
			}
		}
		return converged == n
	})
	took := time.Since(applied)
	var notes []string
	for _, e := range buf.events(t) {
		if e.Event == dev.EventProcessRestarted || e.Event == dev.EventSweep {
			notes = append(notes, fmt.Sprintf("%s %s pid=%d code=%d %s", e.Event, e.Process, e.PID, e.Code, e.Reason))
		}
	}
	t.Logf("after the API server restart: %d of %d converged in %s; dev: %s", converged, n, took.Round(100*time.Millisecond), strings.Join(notes, "; "))
	if err != nil {
		t.Fatalf("%d of %d ConfigWatchers converged within %s of the apply after the API server restart", converged, n, convergeBound)
	}
}

// pollUntil calls cond every 100 ms until it is true or timeout passes.
func pollUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
