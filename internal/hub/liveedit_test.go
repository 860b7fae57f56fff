package hub_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestFilterEditApplies (real API server): an edit of updatedWhen or
// skipObserved on a live Subscription applies without a restart of the
// hub. updatedWhen [labels] keeps a ConfigMap's data updates back until
// it is removed, then they are sent; skipObserved {} keeps a target's
// label change back until it becomes {labels: true}, then it is sent.
func TestFilterEditApplies(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	operatorAccount(t, ns, "op", false, readConfigMaps,
		rbacv1.PolicyRule{APIGroups: []string{"opzero.dev"}, Resources: []string{"subscriptions"}, Verbs: []string{"get", "list", "watch"}})
	s := newSink(t)
	startHub(t, hub.Options{NoWakeups: true})
	settle := func() { time.Sleep(time.Second) }
	// edit changes the Subscription's first resource and waits for the
	// hub to have checked (and rewired) the new generation.
	edit := func(t *testing.T, name string, mutate func(*v1alpha1.SubscribedResource)) {
		t.Helper()
		var gen int64
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &v1alpha1.Subscription{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cur); err != nil {
				return err
			}
			mutate(&cur.Spec.Resources[0])
			err := env.Client.Update(ctx, cur)
			gen = cur.Generation
			return err
		}))
		testkit.Eventually(t, 30*time.Second, name+" checked at its new generation", func(ctx context.Context) (bool, error) {
			cur := &v1alpha1.Subscription{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cur); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.SubscriptionReady)
			return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration >= gen, nil
		})
	}
	expect := func(t *testing.T, what, typ, name string, want int) {
		t.Helper()
		n := func() int { return s.count(about(typ, name)) }
		testkit.Eventually(t, 30*time.Second, what, func(context.Context) (bool, error) { return n() >= want, nil })
		settle()
		if got := n(); got != want {
			t.Fatalf("%s: %d updates of %s sent, want %d", what, got, name, want)
		}
	}

	t.Run("updatedWhen", func(t *testing.T) {
		must(t, env.Client.Create(ctx, subscription(ns, "when", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap",
			Namespaces: []string{ns}, UpdatedWhen: []v1alpha1.UpdatedPart{v1alpha1.UpdatedLabels}})))
		condition(t, ns, "when", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
		cm := configMap(ns, "cm", map[string]string{"v": "0"})
		must(t, env.Client.Create(ctx, cm))
		s.find(t, "the create", about("dev.knative.apiserver.ref.add", "cm"))
		data := func(v string) {
			t.Helper()
			must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &corev1.ConfigMap{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cur); err != nil {
					return err
				}
				cur.Data["v"] = v
				return env.Client.Update(ctx, cur)
			}))
			settle()
		}
		data("1")
		expect(t, "with updatedWhen [labels], a data change is not sent", "dev.knative.apiserver.ref.update", "cm", 0)
		edit(t, "when", func(r *v1alpha1.SubscribedResource) { r.UpdatedWhen = nil })
		data("2")
		expect(t, "with updatedWhen removed, a data change is sent", "dev.knative.apiserver.ref.update", "cm", 1)
	})

	t.Run("skipObserved", func(t *testing.T) {
		must(t, env.Client.Create(ctx, subscription(ns, "skip", s.URL, v1alpha1.SubscribedResource{APIVersion: "opzero.dev/v1alpha1", Kind: "Subscription",
			Mode: v1alpha1.ModeResource, Namespaces: []string{ns}, LabelSelector: "role=target", SkipObserved: &v1alpha1.SkipObserved{}})))
		condition(t, ns, "skip", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
		// The target names an unknown kind: the hub writes its status and
		// serves nothing for it.
		target := subscription(ns, "target", s.URL, v1alpha1.SubscribedResource{APIVersion: "example.com/v1", Kind: "Nothing"})
		target.Labels = map[string]string{"role": "target"}
		must(t, env.Client.Create(ctx, target))
		s.find(t, "the target's add", about("dev.knative.apiserver.resource.add", "target"))
		condition(t, ns, "target", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "UnknownKind")
		label := func(v string) {
			t.Helper()
			must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur := &v1alpha1.Subscription{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(target), cur); err != nil {
					return err
				}
				cur.Labels["l"] = v
				return env.Client.Update(ctx, cur)
			}))
			settle()
		}
		label("1")
		expect(t, "with skipObserved {}, a label change is not sent", "dev.knative.apiserver.resource.update", "target", 0)
		edit(t, "skip", func(r *v1alpha1.SubscribedResource) { r.SkipObserved = &v1alpha1.SkipObserved{Labels: true} })
		label("2")
		expect(t, "with skipObserved {labels: true}, a label change is sent", "dev.knative.apiserver.resource.update", "target", 1)
	})
}
