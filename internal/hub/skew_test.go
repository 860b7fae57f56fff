package hub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
)

// TestWakeupsOfEveryController: a binary running several controllers has
// one Subscription; the Wakeups of spec.operator and of each of
// spec.operators go to its sink, another operator's do not.
func TestWakeupsOfEveryController(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	startHub(t, hub.Options{})
	sub := subscription(ns, "multigroup", s.URL)
	sub.Spec.Operators = []string{"frigate", "destroyer"}
	sub.Spec.Wakeups = true
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "multigroup", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	for op, key := range map[string]string{"multigroup": "a", "frigate": "b", "destroyer": "c", "someone-else": "d"} {
		st := wakeup.NewStore(env.Client, wakeup.StoreOptions{Operator: op, Target: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Sink: s.URL})
		must(t, st.Requeue(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: key}}, 0))
	}
	wakeupOf := func(name string) func(event.Event) bool {
		return func(ev event.Event) bool {
			n, _ := ev.Extensions()["targetname"].(string)
			return ev.Type() == "dev.opzero.wakeup" && n == name
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		s.find(t, "the wakeup of "+k, wakeupOf(k))
	}
	testkit.Eventually(t, 10*time.Second, "the delivered records deleted", func(ctx context.Context) (bool, error) {
		var l v1alpha1.WakeupList
		if err := env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(l.Items) == 1 && l.Items[0].Spec.Operator == "someone-else", nil
	})
	if n := s.count(wakeupOf("d")); n != 0 {
		t.Errorf("the wakeup of another operator was delivered %d times", n)
	}

	bad := subscription(ns, "dup", s.URL)
	bad.Spec.Operators = []string{"dup"}
	must(t, env.Client.Create(ctx, bad))
	c := condition(t, ns, "dup", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "InvalidSpec")
	if !strings.Contains(c.Message, "spec.operators[0]") {
		t.Errorf("condition message %q does not name the field", c.Message)
	}
}

// TestSubscriptionFromNewerOpzero: the CRD of a newer opzero has a field
// this hub does not know, and a Subscription sets it. The hub refuses it
// with a condition that says to upgrade the hub, rather than serving it
// without what the field asks; a Subscription without such a field (an
// older opzero's) is served beside it.
func TestSubscriptionFromNewerOpzero(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	startHub(t, hub.Options{NoWakeups: true})

	// The newer CRD: spec keeps fields the schema does not list.
	crdKey := types.NamespacedName{Name: "subscriptions.opzero.dev"}
	setPreserve := func(v *bool) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := env.Client.Get(ctx, crdKey, &crd); err != nil {
				return err
			}
			spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			spec.XPreserveUnknownFields = v
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
			return env.Client.Update(ctx, &crd)
		}))
	}
	setPreserve(ptr.To(true))
	t.Cleanup(func() { setPreserve(nil) })

	cm := v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}}
	newer := subscription(ns, "newer", s.URL, cm)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(newer)
	must(t, err)
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("opzero.dev/v1alpha1")
	obj.SetKind("Subscription")
	must(t, unstructured.SetNestedField(obj.Object, "fifo", "spec", "ordering"))
	// until the API server serves the new schema, the field is pruned
	testkit.Eventually(t, 30*time.Second, "a Subscription keeping spec.ordering", func(ctx context.Context) (bool, error) {
		o := obj.DeepCopy()
		if err := env.Client.Create(ctx, o); err != nil {
			return false, err
		}
		if _, ok, _ := unstructured.NestedString(o.Object, "spec", "ordering"); ok {
			return true, nil
		}
		return false, env.Client.Delete(ctx, o)
	})
	must(t, env.Client.Create(ctx, subscription(ns, "older", s.URL, cm)))
	t.Cleanup(func() {
		if t.Failed() {
			var got v1alpha1.Subscription
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "newer"}, &got)
			t.Logf("Subscription newer: %v status %+v", err, got.Status)
		}
	})

	c := condition(t, ns, "newer", v1alpha1.SubscriptionReady, metav1.ConditionFalse, "HubOutdated")
	for _, want := range []string{"spec.ordering", "upgrade the hub", hub.BuildVersion()} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition message %q does not say %q", c.Message, want)
		}
	}
	eventOn(t, ns, "newer", "HubOutdated")
	condition(t, ns, "older", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	must(t, env.Client.Create(ctx, configMap(ns, "c", nil)))
	s.find(t, "the older Subscription's event", about("dev.knative.apiserver.ref.add", "c"))
	time.Sleep(500 * time.Millisecond)
	if n := s.count(about("dev.knative.apiserver.ref.add", "c")); n != 1 {
		t.Errorf("ConfigMap c was delivered %d times, want once (the newer Subscription is not served)", n)
	}
}

func init() { _ = apiextensionsv1.AddToScheme(scheme) }
