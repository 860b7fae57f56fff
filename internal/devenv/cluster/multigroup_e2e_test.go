package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/examples/kubebuilder/kbproject"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
)

// multigroup is the multigroup fleet project of examples/kubebuilder
// (kbproject's fleet: kubebuilder's multigroup layout, three APIs in two
// groups with a controller each, a defaulting and validating webhook on
// Frigate; cmd/main.go migrated) on real Knative with the default
// manifests (`opzero manifests ./cmd` in the project's folder, applied
// unchanged): the three controllers in one Knative Service wired to the hub
// by one Subscription (every kind, and every controller's Wakeups:
// spec.operators), the webhooks served through the hub (no process of the
// project's runs at zero), called by the API server. Each kind is created, updated and deleted, each step reconciled
// by a real pod that then scales to zero, a battleship refused before and
// after (kbproject.FleetExercise, as the example's opzero dev test runs
// it); then a Wakeup of each controller, due at zero pods, is delivered
// by the hub to its controller.
func (e *e2e) multigroup(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	kb, cg := kbproject.Tools(t)
	dir, numstat := kbproject.FleetAdopted(t, kb, cg)
	t.Logf("kubebuilder %s multigroup project generated and migrated (cmd/main.go: %s) in %s", kbproject.Version, numstat, time.Since(t0).Round(time.Second))
	ns := e.namespace(t, "e2e-multigroup")
	e.deployIn(t, dir, ns, "./cmd", "--idle", "6s")
	t0 = time.Now()
	e.ready(t, ns, gvrKsvc, 1)
	// named by `opzero manifests` after the project (its config/default's
	// namePrefix fleet- is the project's name: not repeated)
	const svc = "fleet"
	wired := e.wired(t, hubWiring, ns, svc, 0)
	kinds := e.subscribed(t, ns)
	if want := "sea.example.com/v1/Cruiser, ship.example.com/v1/Destroyer, ship.example.com/v1/Frigate"; kinds != want {
		t.Errorf("the Subscription's resources: %s; want %s", kinds, want)
	}
	sub := e.subscription(t, ns)
	operator, _, _ := unstructured.NestedString(sub.Object, "spec", "operator")
	operators, _, _ := unstructured.NestedStringSlice(sub.Object, "spec", "operators")
	wakeups, _, _ := unstructured.NestedBool(sub.Object, "spec", "wakeups")
	t.Logf("Knative Service %s Ready, %s (resources %s; operator %s, operators %v, wakeups %v) %s after apply",
		svc, wired, kinds, operator, operators, wakeups, time.Since(t0).Round(time.Millisecond))
	if !wakeups || len(operators) != len(kbproject.FleetAPIs) {
		t.Fatalf("the Subscription has wakeups %v and operators %v: want the Wakeups of the %d controllers", wakeups, operators, len(kbproject.FleetAPIs))
	}
	t.Cleanup(func() { // cluster-scoped: they would outlive the namespace
		for _, gvr := range []schema.GroupVersionResource{gvrMutatingConfigs, gvrValidatingConfs} {
			_ = e.dyn.Resource(gvr).Delete(context.Background(), "opzero-"+ns+"-"+svc, metav1.DeleteOptions{})
		}
	})
	// The hub reads the webhook configurations and writes its CA into
	// them; a dry run calls the webhooks and creates nothing.
	testkit.Eventually(t, 4*time.Minute, "the validating webhook in force through the hub", func(ctx context.Context) (bool, error) {
		o := kbproject.FleetObject(kbproject.FleetAPIs[0].Group, kbproject.FleetAPIs[0].Kind, ns, "probe")
		o.SetLabels(map[string]string{"class": "battleship"})
		_, err := e.dyn.Resource(schema.GroupVersionResource{Group: kbproject.FleetAPIs[0].Group + ".example.com", Version: "v1", Resource: "frigates"}).
			Namespace(ns).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "a Frigate cannot be of class battleship"), err
	})
	t.Logf("the revision's first pod gone %s later", e.waitZero(t, ns, svc).Round(time.Second))

	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kbproject.FleetExercise(t, c, ns, func(step string) {
		t.Logf("%s at zero pods: reconciled; scaled to zero %s after", step, e.waitZero(t, ns, svc).Round(time.Second))
	})

	// The last delete reaches the operator after the exercise saw it gone:
	// a pod may start after it returned. Quiet first: zero pods for 15 s.
	e.waitQuiet(t, ns, svc, 15*time.Second)

	// A Wakeup of each controller (named by the operator's description,
	// as spec.operators lists them), due at zero pods.
	ctrllog.SetLogger(logr.Discard())
	targets := map[string]reconcile.Request{}
	const after = 15 * time.Second
	due := time.Now().Add(after)
	for _, a := range kbproject.FleetAPIs {
		i := slices.IndexFunc(operators, func(op string) bool { return strings.Contains(strings.ToLower(op), strings.ToLower(a.Kind)) })
		if i < 0 {
			t.Fatalf("no controller of %s among spec.operators %v", a.Kind, operators)
		}
		store := wakeup.NewStore(c, wakeup.StoreOptions{Operator: operators[i], Namespace: ns,
			Target: schema.GroupVersionKind{Group: a.Group + ".example.com", Version: "v1", Kind: a.Kind},
			Sink:   fmt.Sprintf("http://%s.%s.svc.cluster.local", svc, ns)})
		key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "wakeup-" + strings.ToLower(a.Kind)}}
		if err := store.Requeue(ctx, key, time.Until(due)); err != nil {
			t.Fatal(err)
		}
		targets[operators[i]] = key
	}
	woke := e.wokeBy(t, ns, svc, "the Wakeups", due)
	testkit.Eventually(t, time.Minute, "the Wakeups delivered and deleted", func(ctx context.Context) (bool, error) {
		var left []string
		for op, key := range targets {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: wakeup.Name(op, key.NamespacedName)}, &v1alpha1.Wakeup{})
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			if err == nil {
				left = append(left, op)
			}
		}
		return len(left) == 0, fmt.Errorf("the Wakeups of %v left", left)
	})
	logs := e.operatorLogs(t, ns, svc)
	for op, key := range targets {
		delivered := slices.ContainsFunc(strings.Split(logs, "\n"), func(l string) bool {
			// JSON or zap's development encoding, as the project sets it
			return strings.Contains(l, cloudevent.WakeupType) && strings.Contains(l, key.String())
		})
		if !delivered {
			t.Errorf("the operator's log has no %s delivery of %s (controller %s):\n%s", cloudevent.WakeupType, key, op, logs)
		}
	}
	t.Logf("a Wakeup of each of the %d controllers due %s after it was written, at zero pods: a pod started %s after the due time, each delivered to its controller and deleted",
		len(targets), after, woke.Sub(due).Round(time.Millisecond))
	t.Logf("scaled to zero %s after", e.waitZero(t, ns, svc).Round(time.Second))
}

// waitQuiet waits until the service has had no pod for quiet in a row.
func (e *e2e) waitQuiet(t *testing.T, ns, svc string, quiet time.Duration) {
	t.Helper()
	since := time.Time{}
	testkit.Eventually(t, 3*time.Minute, fmt.Sprintf("no pod of %s for %s", svc, quiet), func(ctx context.Context) (bool, error) {
		pods, err := e.servicePods(ctx, ns, svc)
		if err != nil || len(pods) > 0 {
			since = time.Time{}
			return false, err
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= quiet, nil
	})
}

// wokeBy waits until a pod of svc runs, started by what (Wakeups due at
// due, the service at zero before), and returns when it was first seen;
// a pod more than a second before due is an error.
func (e *e2e) wokeBy(t *testing.T, ns, svc, what string, due time.Time) time.Time {
	t.Helper()
	var woke time.Time
	testkit.Eventually(t, 2*time.Minute, "the operator started by "+what, func(ctx context.Context) (bool, error) {
		pods, err := e.servicePods(ctx, ns, svc)
		if err == nil && len(pods) > 0 && woke.IsZero() {
			woke = time.Now()
		}
		return len(pods) > 0, err
	})
	if early := due.Sub(woke); early > time.Second {
		t.Errorf("a pod started %s before %s due", early, what)
	}
	return woke
}
