package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/internal/testkit"
)

var gvrBundle = schema.GroupVersionResource{Group: "bundles.opzero.dev", Version: "v1alpha1", Resource: "bundles"}

// bundles is examples/bundles, a project of the cache-heavy shape (a
// second cache of its own watched metadata-only through a raw source, a
// Watches-only controller, cobra flags, a manager cache restricted to one
// namespace, its webhook declared in YAML, probes on its own port),
// deployed from its own module with the default manifests (the hub
// wiring) on the real node: its webhook refuses an invalid Bundle at
// zero; a Bundle created at zero gets its target in every namespace;
// unrelated ConfigMap changes in another namespace start no pod; a
// target deleted at zero is restored, timed beside the Bundle's first
// cold start.
func (e *e2e) bundles(t *testing.T) {
	const svc = "bundle"
	ctx := context.Background()
	ns := e.namespace(t, "e2e-bundles")
	other := e.namespace(t, "e2e-bundles-other")
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ca-source"}, Data: map[string]string{"ca.crt": "ROOT-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.deployIn(t, filepath.Join(e.root, "examples", "bundles"), ns, "--operator", "./cmd", "--idle", "6s", "--", "--trust-namespace="+ns)
	e.ready(t, ns, gvrKsvc, 1)
	t.Logf("wiring: %s", e.wired(t, hubWiring, ns, svc, 0))
	t.Logf("the revision's first pod gone %s later", e.waitZero(t, ns, svc).Round(time.Second))

	bundle := func(name, cm, key string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"source": map[string]any{"configMap": cm, "key": key}}}}
		u.SetAPIVersion("bundles.opzero.dev/v1alpha1")
		u.SetKind("Bundle")
		u.SetName(name)
		return u
	}
	// The project's YAML webhook, through the hub, at zero.
	var refused error
	testkit.Eventually(t, 2*time.Minute, "the project's validating webhook refusing an invalid Bundle", func(ctx context.Context) (bool, error) {
		_, refused = e.dyn.Resource(gvrBundle).Create(ctx, bundle("invalid-"+e.run, "", ""), metav1.CreateOptions{})
		if refused == nil {
			_ = e.dyn.Resource(gvrBundle).Delete(ctx, "invalid-"+e.run, metav1.DeleteOptions{})
		}
		return refused != nil && strings.Contains(refused.Error(), "a Bundle names its source ConfigMap and key"), fmt.Errorf("%v", refused)
	})
	t.Logf("an invalid Bundle created at zero: %v", refused)
	e.waitZero(t, ns, svc)

	// A Bundle created at zero: its target in every namespace.
	name := "trust-" + e.run
	t0 := time.Now()
	if _, err := e.dyn.Resource(gvrBundle).Create(ctx, bundle(name, "ca-source", "ca.crt"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.dyn.Resource(gvrBundle).Delete(context.Background(), name, metav1.DeleteOptions{}) }) // its targets go with it
	target := func(in string) {
		t.Helper()
		testkit.Eventually(t, 2*time.Minute, "the Bundle's target in "+in, func(ctx context.Context) (bool, error) {
			cm, err := e.cs.CoreV1().ConfigMaps(in).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && cm.Data["ca.crt"] == "ROOT-1" && len(cm.OwnerReferences) == 1, err
		})
	}
	for _, n := range []string{ns, other, "default"} {
		target(n)
	}
	first := time.Since(t0)
	t.Logf("a Bundle created at zero: its targets in %s, %s and default after %s (a cold start)", ns, other, first.Round(time.Millisecond))
	e.waitZero(t, ns, svc)

	// Unrelated changes at zero start nothing.
	before := e.podUIDs(t, ns, svc)
	for i := range 10 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("unrelated-", i)}, Data: map[string]string{"a": "1"}}
		if cm, err := e.cs.CoreV1().ConfigMaps(other).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		} else {
			cm.Data["a"] = "2"
			if _, err := e.cs.CoreV1().ConfigMaps(other).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.cs.CoreV1().ConfigMaps(other).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second)
	if e.newPod(t, ns, svc, before) {
		t.Errorf("30 unrelated ConfigMap changes in %s started the operator", other)
	} else {
		t.Logf("30 unrelated ConfigMap changes in %s: no pod started", other)
	}

	// A target deleted at zero is restored.
	e.waitZero(t, ns, svc)
	t0 = time.Now()
	if err := e.cs.CoreV1().ConfigMaps(other).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	target(other)
	e.figure(t, "real node: examples/bundles (hub wiring), a target deleted at zero restored after %s; the Bundle created at zero reconciled in every namespace after %s (a cold start; goal: restore <= 1 cold start + 1 s)",
		time.Since(t0).Round(time.Millisecond), first.Round(time.Millisecond))
}
