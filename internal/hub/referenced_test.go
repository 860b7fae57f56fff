package hub_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/resourceversion"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// told: the hub's update of an object that became referenced.
func told(name string) func(event.Event) bool {
	return func(ev event.Event) bool {
		r, _ := ev.Extensions()[hub.ReasonExtension].(string)
		return about("dev.knative.apiserver.ref.update", name)(ev) && r == hub.ReasonReferenced
	}
}

// changed: a Reference-mode update of a change of name (not told).
func changed(name string) func(event.Event) bool {
	return func(ev event.Event) bool {
		return about("dev.knative.apiserver.ref.update", name)(ev) && !told(name)(ev)
	}
}

// TestReferencedAgainIsTold: an object's changes while no referrer names
// it are not sent (referencedBy), so an operator may hold an older copy
// of it (its event cache, a read from when it was referenced before).
// When a referrer's change makes it referenced, the hub sends a
// Reference-mode update of it (extension opzeroreason=referenced), and
// the progress of the referrers' watch does not move past that change
// until the update is settled: a hub that dies first sends the change
// again. Every request carries the hub's epoch. A name referenced by a
// second referrer is not told again.
func TestReferencedAgainIsTold(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	var hold atomic.Bool
	hold.Store(true)
	var refused atomic.Int32
	s.answer = func(ev event.Event, _ int) (int, http.Header) {
		if told("target")(ev) && hold.Load() {
			refused.Add(1)
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	}
	h, _ := startHub(t, hub.Options{NoWakeups: true})
	// Referrers are ConfigMaps labelled role=referrer naming another in
	// data.target; every ConfigMap is also subscribed in Resource mode
	// (the index is fed by that watch, as an operator's primary kind
	// feeds it).
	sub := subscription(ns, "refs", s.URL,
		v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}, LabelSelector: "role!=referrer",
			ReferencedBy: &v1alpha1.Referrer{APIVersion: "v1", Kind: "ConfigMap", FieldPath: "data.target"}},
		v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: v1alpha1.ModeResource, Namespaces: []string{ns}})
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "refs", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")

	filtered := h.Stats().Filtered()
	target := configMap(ns, "target", map[string]string{"v": "1"})
	must(t, env.Client.Create(ctx, target))
	// Its add is filtered once the referrer index has listed (the filter
	// waits for it): a referrer created before that list is in it, and a
	// name referenced by a list is not told (the epoch changes instead).
	testkit.Eventually(t, 30*time.Second, "target's add filtered", func(context.Context) (bool, error) { return h.Stats().Filtered() > filtered, nil })
	target.Data["v"] = "2"
	must(t, env.Client.Update(ctx, target)) // not sent: nobody names it
	referrer := configMap(ns, "referrer", map[string]string{"target": "target"})
	referrer.Labels = map[string]string{"role": "referrer"}
	must(t, env.Client.Create(ctx, referrer))
	s.find(t, "the referrer's add", about("dev.knative.apiserver.resource.add", "referrer"))
	testkit.Eventually(t, 30*time.Second, "the update of target refused twice", func(context.Context) (bool, error) { return refused.Load() >= 2, nil })
	key := "v1/ConfigMap@" + ns
	if p := progressOf(t, ns, "refs", key); p != "" && !before(t, p, referrer.ResourceVersion) {
		t.Fatalf("progress %s of the referrers at %s, past the referrer's change %s while the update of target is not settled", key, p, referrer.ResourceVersion)
	}
	hold.Store(false)
	s.find(t, "the update of target", told("target"))
	testkit.Eventually(t, 30*time.Second, "the referrers' progress past the referrer's change", func(context.Context) (bool, error) {
		p := progressOf(t, ns, "refs", key)
		return p != "" && !before(t, p, referrer.ResourceVersion), nil
	})

	// A second referrer of target: nothing to tell.
	second := configMap(ns, "second", map[string]string{"target": "target"})
	second.Labels = map[string]string{"role": "referrer"}
	must(t, env.Client.Create(ctx, second))
	s.find(t, "the second referrer's add", about("dev.knative.apiserver.resource.add", "second"))
	target.Data["v"] = "3"
	must(t, env.Client.Update(ctx, target))
	s.find(t, "target's own update", changed("target"))
	if n := s.count(told("target")); n != 1+int(refused.Load()) {
		t.Errorf("target told %d times (%d refused), want once answered", n, refused.Load())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ep := range s.epochs {
		if ep == "" {
			t.Fatalf("request %d (%s) without %s", i, s.events[i].Type(), hub.EpochHeader)
		}
	}
}

// progressOf is the Subscription's progress for resource key ("" none).
func progressOf(t *testing.T, ns, name, key string) string {
	t.Helper()
	var sub v1alpha1.Subscription
	must(t, testenv.Get(t).Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &sub))
	for _, p := range sub.Status.Progress {
		if p.Resource == key {
			return p.ResourceVersion
		}
	}
	return ""
}

func before(t *testing.T, rv, than string) bool {
	c, err := resourceversion.CompareResourceVersion(rv, than)
	if err != nil {
		t.Fatal(err)
	}
	return c < 0
}
