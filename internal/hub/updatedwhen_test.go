package hub_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestUpdatedWhen (real API server): with updatedWhen, the hub sends an
// update only when it changes one of the named parts since the object's
// previous change it saw, as the operator's GenerationChangedPredicate or
// LabelChangedPredicate would pass it. Creates and deletes are sent; so is
// the first update of an object that existed before the hub watched it
// (nothing to compare with). The generation case watches Subscriptions:
// the hub's own status write on the target is the echo an operator's
// status write would be.
func TestUpdatedWhen(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	operatorAccount(t, ns, "op", false, readConfigMaps,
		rbacv1.PolicyRule{APIGroups: []string{"opzero.dev"}, Resources: []string{"subscriptions"}, Verbs: []string{"get", "list", "watch"}})
	s := newSink(t)
	early := configMap(ns, "early", map[string]string{"v": "0"})
	must(t, env.Client.Create(ctx, early))
	startHub(t, hub.Options{NoWakeups: true})
	must(t, env.Client.Create(ctx, subscription(ns, "labels", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap",
		Namespaces: []string{ns}, UpdatedWhen: []v1alpha1.UpdatedPart{v1alpha1.UpdatedLabels}})))
	condition(t, ns, "labels", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")

	settle := func() { time.Sleep(time.Second) }
	edit := func(cm *corev1.ConfigMap, mutate func(*corev1.ConfigMap)) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cur); err != nil {
				return err
			}
			mutate(cur)
			return env.Client.Update(ctx, cur)
		}))
		settle()
	}
	expect := func(what, name string, want int) {
		t.Helper()
		updates := func() int { return s.count(about("dev.knative.apiserver.ref.update", name)) }
		testkit.Eventually(t, 30*time.Second, what, func(context.Context) (bool, error) { return updates() >= want, nil })
		settle()
		if got := updates(); got != want {
			t.Fatalf("%s: %d updates of %s sent, want %d", what, got, name, want)
		}
	}

	edit(early, func(cm *corev1.ConfigMap) { cm.Data["v"] = "1" })
	expect("the first update of an object the hub had not seen change is sent", "early", 1)
	edit(early, func(cm *corev1.ConfigMap) { cm.Data["v"] = "2" })
	expect("then a data change is not", "early", 1)

	cm := configMap(ns, "cm", map[string]string{"v": "0"})
	must(t, env.Client.Create(ctx, cm))
	s.find(t, "the create", about("dev.knative.apiserver.ref.add", "cm"))
	edit(cm, func(cm *corev1.ConfigMap) { cm.Data["v"] = "1" })
	expect("a data change after the create is not sent", "cm", 0)
	edit(cm, func(cm *corev1.ConfigMap) { cm.Annotations = map[string]string{"a": "1"} })
	expect("an annotation change (not named) is not sent", "cm", 0)
	edit(cm, func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"l": "1"} })
	expect("a label change is sent", "cm", 1)
	edit(cm, func(cm *corev1.ConfigMap) { cm.Data["v"] = "2" })
	expect("a data change after it is not", "cm", 1)
	must(t, env.Client.Delete(ctx, cm))
	s.find(t, "the delete", about("dev.knative.apiserver.ref.delete", "cm"))

	// generation: the target Subscription's status (written by the hub)
	// is not sent, its spec is.
	must(t, env.Client.Create(ctx, subscription(ns, "generation", s.URL, v1alpha1.SubscribedResource{APIVersion: "opzero.dev/v1alpha1", Kind: "Subscription",
		Namespaces: []string{ns}, LabelSelector: "role=target", UpdatedWhen: []v1alpha1.UpdatedPart{v1alpha1.UpdatedGeneration}})))
	condition(t, ns, "generation", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	target := subscription(ns, "target", s.URL, v1alpha1.SubscribedResource{APIVersion: "example.com/v1", Kind: "Nothing"})
	target.Labels = map[string]string{"role": "target"}
	must(t, env.Client.Create(ctx, target))
	s.find(t, "the target's add", about("dev.knative.apiserver.ref.add", "target"))
	condition(t, ns, "target", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "UnknownKind")
	expect("the hub's status write on the target is not sent", "target", 0)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &v1alpha1.Subscription{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(target), cur); err != nil {
			return err
		}
		cur.Spec.Operator = "other"
		return env.Client.Update(ctx, cur)
	}))
	expect("a new generation is sent, its status echo is not", "target", 1)
}
