package hub_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/testenv"
)

// TestEvents (real API server): with events [created, deleted], the hub
// sends the create and the delete of a ConfigMap and none of its updates;
// an unknown type makes the Subscription not Valid, naming it.
func TestEvents(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	operatorAccount(t, ns, "op", false, readConfigMaps)
	s := newSink(t)
	startHub(t, hub.Options{NoWakeups: true})
	must(t, env.Client.Create(ctx, subscription(ns, "events", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap",
		Namespaces: []string{ns}, Events: []v1alpha1.EventType{v1alpha1.EventCreated, v1alpha1.EventDeleted}})))
	condition(t, ns, "events", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")

	cm := configMap(ns, "cm", map[string]string{"v": "0"})
	must(t, env.Client.Create(ctx, cm))
	s.find(t, "the create", about("dev.knative.apiserver.ref.add", "cm"))
	for i := range 5 {
		cur := &corev1.ConfigMap{}
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cur))
		cur.Data["v"] = string(rune('1' + i))
		must(t, env.Client.Update(ctx, cur))
	}
	must(t, env.Client.Delete(ctx, cm))
	s.find(t, "the delete", about("dev.knative.apiserver.ref.delete", "cm"))
	time.Sleep(time.Second)
	if n := s.count(about("dev.knative.apiserver.ref.update", "cm")); n != 0 {
		t.Errorf("%d updates sent, want none (events: [created, deleted])", n)
	}

	bad := subscription(ns, "bad", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap",
		Namespaces: []string{ns}, Events: []v1alpha1.EventType{"patched"}})
	if err := env.Client.Create(ctx, bad); err == nil {
		t.Errorf("events [patched]: the CRD's enum let it through")
	}
}
