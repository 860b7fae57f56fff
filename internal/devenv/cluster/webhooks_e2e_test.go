package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
)

var (
	gvrWidget          = schema.GroupVersionResource{Group: "widgets.opzero.dev", Version: "v1", Resource: "widgets"}
	gvrMutatingConfigs = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	gvrValidatingConfs = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
)

// webhooks is an adopted controller-runtime project with a defaulting and
// a validating webhook (internal/manifests/testdata/widgets, a kubebuilder
// main) on real Knative, its manifests as `opzero manifests --source=hub`
// writes them (the webhooks through the hub, the default), applied
// unchanged: no process of the project's runs at zero. Each of 10 times at
// zero pods, a Widget create is defaulted by the webhook (the API server
// calls the hub, which wakes a pod inside the call); an invalid one is
// refused at zero; the operator's own event at zero (its ConfigMap
// deleted, re-made) is timed in the same run; then warm admissions.
func (e *e2e) webhooks(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(t, "e2e-webhooks")
	e.deploy(t, ns, "./internal/manifests/testdata/widgets", "--source=hub", "--idle", "6s")
	t.Cleanup(func() { // cluster-scoped: they would outlive the namespace and refuse every Widget write
		for _, gvr := range []schema.GroupVersionResource{gvrMutatingConfigs, gvrValidatingConfs} {
			_ = e.dyn.Resource(gvr).Delete(context.Background(), "opzero-"+ns+"-widgets", metav1.DeleteOptions{})
		}
	})
	e.ready(t, ns, gvrKsvc, 1)
	const svc = "widgets"
	ws := e.dyn.Resource(gvrWidget).Namespace(ns)
	widget := func(name string, size int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "widgets.opzero.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"size": size}}}
	}
	refused := func(name string) bool {
		_, err := ws.Create(ctx, widget(name, 500), metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "size over 100 is not allowed")
	}
	// The hub reads the configurations and writes its CA into them.
	testkit.Eventually(t, 4*time.Minute, "the validating webhook in force through the hub", func(context.Context) (bool, error) {
		return refused("probe"), nil
	})

	var admit, event []time.Duration
	for i := 0; len(admit) < 10 || len(event) < 10; i++ {
		if i == 20 {
			t.Fatalf("20 tries for 10 cold starts of each (%d admissions, %d events): pods still draining served the rest", len(admit), len(event))
		}
		e.waitZero(t, ns, svc)
		before := e.podUIDs(t, ns, svc)
		t0 := time.Now()
		w, err := ws.Create(ctx, widget(fmt.Sprint("w-", i), 1), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a create at zero pods: %v", err)
		}
		if d := time.Since(t0); e.newPod(t, ns, svc, before) {
			admit = append(admit, d)
		} else {
			t.Logf("admission %d answered in %s by a pod still draining, not a cold start: not counted", i, d)
		}
		if c, _, _ := unstructured.NestedString(w.Object, "spec", "color"); c != "green" {
			t.Fatalf("a create at zero pods: spec.color %q, want green from the defaulting webhook", c)
		}
		cm := fmt.Sprint("w-", i, "-widget")
		testkit.Eventually(t, 2*time.Minute, "ConfigMap "+cm, func(ctx context.Context) (bool, error) {
			_, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, cm, metav1.GetOptions{})
			return err == nil, nil
		})
		old, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, cm, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.waitZero(t, ns, svc)
		before = e.podUIDs(t, ns, svc)
		t0 = time.Now()
		if err := e.cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 2*time.Minute, "ConfigMap "+cm+" made again", func(ctx context.Context) (bool, error) {
			got, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, cm, metav1.GetOptions{})
			return err == nil && got.UID != old.UID, nil
		})
		if d := time.Since(t0); e.newPod(t, ns, svc, before) {
			event = append(event, d)
		} else {
			t.Logf("event %d reconciled in %s by a pod still draining, not a cold start: not counted", i, d)
		}
	}
	admit, event = admit[:10], event[:10]
	e.waitZero(t, ns, svc)
	if !refused("too-big") {
		t.Fatal("an invalid Widget created at zero pods was not refused by the validating webhook")
	}
	if _, err := ws.Get(ctx, "too-big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused Widget: %v, want not found", err)
	}
	var warm []time.Duration
	for i := range 20 {
		t0 := time.Now()
		if _, err := ws.Create(ctx, widget(fmt.Sprint("warm-", i), 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		warm = append(warm, time.Since(t0))
	}
	e.figure(t, "real Knative: admission at zero pods -> answered (create, defaulted through the hub): %s", durations(admit))
	e.figure(t, "real Knative: the operator's event at zero pods -> reconciled (ConfigMap deleted -> made again): %s", durations(event))
	e.figure(t, "real Knative: admission p50 / event p50 = %.2fx (goal <= 1.5x); max admission %s (timeoutSeconds 10)",
		float64(median(admit))/float64(median(event)), maxOf(admit).Round(time.Millisecond))
	e.figure(t, "real Knative: warm admission (create) through the hub: %s", durations(warm))
	e.webhooksCompared(t, ns, warm)
}

// webhooksCompared runs the same project as a user who keeps its webhooks
// always on (--webhooks=always-on) and as its classic self (--mode=classic)
// beside the hub wiring's figures (the hub wiring deployed in hubNS, its
// warm admissions): warm admission against the always-on server, and what
// stays on at zero in each (kubelet's working set, as `kubectl top`). Each
// wiring runs in a namespace of its own once the one before has its
// webhook configurations deleted: they take Widgets of every namespace.
func (e *e2e) webhooksCompared(t *testing.T, hubNS string, warmHub []time.Duration) {
	ctx := context.Background()
	const svc = "widgets"
	configs := func(ns string) func() {
		return func() {
			for _, gvr := range []schema.GroupVersionResource{gvrMutatingConfigs, gvrValidatingConfs} {
				_ = e.dyn.Resource(gvr).Delete(context.Background(), "opzero-"+ns+"-widgets", metav1.DeleteOptions{})
			}
		}
	}
	inForce := func(ns string) {
		testkit.Eventually(t, 4*time.Minute, "the validating webhook in force in "+ns, func(ctx context.Context) (bool, error) {
			_, err := e.dyn.Resource(gvrWidget).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "widgets.opzero.dev/v1", "kind": "Widget", "metadata": map[string]any{"name": "probe"},
				"spec": map[string]any{"size": int64(500)}}}, metav1.CreateOptions{})
			return err != nil && strings.Contains(err.Error(), "size over 100 is not allowed"), nil
		})
	}
	total := func(pods []podMemory) (ws float64, names []string) {
		for _, p := range pods {
			ws += mib(p.WorkingSet)
			names = append(names, fmt.Sprintf("%s %.1f MiB", p.Name, mib(p.WorkingSet)))
		}
		return ws, names
	}

	e.waitZero(t, hubNS, svc)
	settled(45 * time.Second)
	hubWS, hubPods := total(e.memory(t, map[string][]string{manifests.HubNamespace: {manifests.HubName}}))
	configs(hubNS)()

	onNS := e.namespace(t, "e2e-webhooks-on")
	e.deploy(t, onNS, "./internal/manifests/testdata/widgets", "--source=hub", "--webhooks=always-on", "--idle", "6s")
	t.Cleanup(configs(onNS))
	e.waitAvailable(t, onNS, svc+"-webhooks")
	inForce(onNS)
	var warmOn []time.Duration
	for i := range 20 {
		t0 := time.Now()
		if _, err := e.dyn.Resource(gvrWidget).Namespace(onNS).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "widgets.opzero.dev/v1", "kind": "Widget", "metadata": map[string]any{"name": fmt.Sprint("warm-", i)},
			"spec": map[string]any{"size": int64(1)}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		warmOn = append(warmOn, time.Since(t0))
	}
	e.waitZero(t, onNS, svc)
	settled(45 * time.Second)
	onWS, onPods := total(e.memory(t, map[string][]string{onNS: {svc + "-webhooks"}}))
	configs(onNS)()

	classicNS := e.namespace(t, "e2e-webhooks-classic")
	e.deploy(t, classicNS, "./internal/manifests/testdata/widgets", "--mode=classic")
	t.Cleanup(configs(classicNS))
	e.waitAvailable(t, classicNS, svc)
	inForce(classicNS) // its manager serves its webhooks: its steady state
	settled(45 * time.Second)
	classicWS, classicPods := total(e.memory(t, map[string][]string{classicNS: {svc}}))

	e.figure(t, "real Knative: warm admission (create), the same run: through the hub p50 %s, --webhooks=always-on p50 %s (%s)",
		median(warmHub).Round(time.Millisecond), median(warmOn).Round(time.Millisecond), durations(warmOn))
	e.figure(t, "real Knative: always on at zero, kubelet's working set: hub wiring (the default) %.1f MiB %v; --webhooks=always-on %.1f MiB (the hub and %v); classic (--mode=classic) %.1f MiB %v",
		hubWS, hubPods, hubWS+onWS, onPods, classicWS, classicPods)
	e.figure(t, "real Knative: always on at zero vs classic: hub wiring %.2fx (goal <= 0.3x), --webhooks=always-on %.2fx",
		hubWS/classicWS, (hubWS+onWS)/classicWS)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func maxOf(ds []time.Duration) time.Duration { return slices.Max(ds) }
