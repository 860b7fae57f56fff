package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// activator stands in for Knative's activator at zero pods: it holds each
// request until released (then answers 200) or until the hub gives up on
// it, and records which.
type activator struct {
	*httptest.Server
	release chan struct{}

	mu        sync.Mutex
	ids       []string // events received
	cancelled []string // of those, the ones the hub cancelled
	answered  []string
}

func newActivator(t *testing.T) *activator {
	a := &activator{release: make(chan struct{})}
	a.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			t.Errorf("the hub sent something that is not a CloudEvent: %v", err)
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.ids = append(a.ids, ev.ID())
		a.mu.Unlock()
		select {
		case <-a.release:
			a.mu.Lock()
			a.answered = append(a.answered, ev.ID())
			a.mu.Unlock()
			rw.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
			a.mu.Lock()
			a.cancelled = append(a.cancelled, ev.ID())
			a.mu.Unlock()
		}
	}))
	t.Cleanup(func() {
		select {
		case <-a.release:
		default:
			close(a.release)
		}
		a.Close()
	})
	return a
}

func (a *activator) seen() (ids, cancelled, answered []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ids...), append([]string(nil), a.cancelled...), append([]string(nil), a.answered...)
}

// podSink is a sink on an address an EndpointSlice may hold.
func podSink(t *testing.T) (*sink, string) {
	l, ip := testkit.HostListener(t)
	return newSinkOn(t, l), ip
}

// knativeSink makes the Knative Service name whose address is the
// activator and whose container port is the pod sink's, and a
// Subscription of ConfigMaps sent to it; it returns a function that
// writes the Service's private EndpointSlice with one endpoint at
// ip (ready or not).
func knativeSink(t *testing.T, ns, name string, a *activator, pod *sink, ip string) (setEndpoint func(ready bool)) {
	t.Helper()
	env, ctx := testenv.Get(t), context.Background()
	u, err := url.Parse(pod.URL)
	must(t, err)
	port, err := strconv.ParseInt(u.Port(), 10, 64)
	must(t, err)
	ksvc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"serviceAccountName": "op", "containers": []any{map[string]any{
			"image": "ko://example.com/op", "ports": []any{map[string]any{"containerPort": port}}}}}}}}}
	must(t, env.Client.Create(ctx, ksvc))
	must(t, unstructured.SetNestedField(ksvc.Object, a.URL, "status", "address", "url"))
	must(t, env.Client.Status().Update(ctx, ksvc))
	sub := subscription(ns, name, "", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})
	sub.Spec.Sink = v1alpha1.Destination{Ref: &v1alpha1.KReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: name}}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, name, v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	slice := &unstructured.Unstructured{}
	return func(ready bool) {
		t.Helper()
		rv := slice.GetResourceVersion()
		slice.Object = testkit.PrivateEndpointSlice(ns, name+"-00001-private-abcde", name, ip, ready)
		slice.SetResourceVersion(rv)
		if rv == "" {
			must(t, env.Client.Create(ctx, slice))
			return
		}
		must(t, env.Client.Update(ctx, slice))
	}
}

// TestEarlyDelivery: an event for a Knative Service whose route holds it
// (the activator waiting for a pod) is posted also to the pod that
// starts, which answers it: the send is settled once, by that answer, and
// the held request is cancelled. Not when a pod is ready (the route
// serves), not when the starting pod answers anything but 2xx or 500 (the
// route's answer decides), not with NoEarlyDelivery.
func TestEarlyDelivery(t *testing.T) {
	added := func(name string) func(event.Event) bool { return about("dev.knative.apiserver.ref.add", name) }

	t.Run("starting pod answers", func(t *testing.T) {
		env, ctx, ns := withReader(t)
		a := newActivator(t)
		pod, ip := podSink(t)
		h, _ := startHub(t, hub.Options{NoWakeups: true})
		setEndpoint := knativeSink(t, ns, "op", a, pod, ip)
		must(t, env.Client.Create(ctx, configMap(ns, "before-pod", nil)))
		// The route holds it; the pod has no address yet: nothing else.
		time.Sleep(500 * time.Millisecond)
		if n := len(pod.all()); n != 0 {
			t.Fatalf("the pod got %d events before it had an address", n)
		}
		setEndpoint(false) // the pod's sandbox is up, it is not ready
		ev := pod.find(t, "the event at the starting pod", added("before-pod"))
		pod.mu.Lock()
		epoch := pod.epochs[0]
		pod.mu.Unlock()
		if epoch == "" {
			t.Errorf("the direct request carries no %s (the operator's event cache needs it)", hub.EpochHeader)
		}
		testkit.Eventually(t, 30*time.Second, "the route's request cancelled", func(context.Context) (bool, error) {
			_, cancelled, _ := a.seen()
			return len(cancelled) == 1, nil
		})
		ids, cancelled, answered := a.seen()
		if len(ids) != 1 || ids[0] != ev.ID() || cancelled[0] != ev.ID() || len(answered) != 0 {
			t.Errorf("the route got %v (cancelled %v, answered %v), want the pod's event %s, cancelled", ids, cancelled, answered, ev.ID())
		}
		if got := h.Stats().Early(); got != 1 {
			t.Errorf("early deliveries %v, want 1", got)
		}
		// Once the pod is ready, the route serves: nothing goes to the pod
		// directly any more.
		setEndpoint(true)
		time.Sleep(300 * time.Millisecond) // the hub's watch sees the slice
		must(t, env.Client.Create(ctx, configMap(ns, "pod-ready", nil)))
		time.Sleep(time.Second)
		if n := pod.count(added("pod-ready")); n != 0 {
			t.Errorf("posted %d times to a ready pod directly", n)
		}
		close(a.release)
		testkit.Eventually(t, 30*time.Second, "pod-ready answered through the route", func(context.Context) (bool, error) {
			_, _, answered := a.seen()
			return len(answered) == 1, nil
		})
		if got := h.Stats().Early(); got != 1 {
			t.Errorf("early deliveries %v, want still 1", got)
		}
	})

	t.Run("starting pod announces itself", func(t *testing.T) {
		// The pod's address is in no EndpointSlice yet (the kubelet posts
		// it at its next relist): the operator tells the hub.
		env, ctx, ns := withReader(t)
		must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}}))
		a := newActivator(t)
		pod, ip := podSink(t)
		dyn, err := dynamic.NewForConfig(env.Config)
		must(t, err)
		st := starting.NewServices(dyn, logr.Discard())
		hubEndpoint := httptest.NewServer(st.Handler())
		t.Cleanup(hubEndpoint.Close)
		h, _ := startHub(t, hub.Options{NoWakeups: true, Starting: st})
		setEndpoint := knativeSink(t, ns, "op", a, pod, ip)
		must(t, env.Client.Create(ctx, configMap(ns, "announced", nil)))
		time.Sleep(300 * time.Millisecond) // the route holds it: the hub follows the Service

		cs, err := kubernetes.NewForConfig(env.Config)
		must(t, err)
		token := func(sa, audience string) string {
			tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}}}, metav1.CreateOptions{})
			must(t, err)
			return tr.Status.Token
		}
		podAddr := strings.TrimPrefix(pod.URL, "http://")
		announce := func(tok, body string) int {
			req, err := http.NewRequest(http.MethodPost, hubEndpoint.URL+starting.AnnouncePath, strings.NewReader(body))
			must(t, err)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		good := `{"service":"op","address":"` + podAddr + `"}`
		for _, bad := range []struct {
			what, tok, body string
			want            int
		}{
			{"no token", "", good, http.StatusUnauthorized},
			{"a token for another audience", token("op", "someone-else"), good, http.StatusUnauthorized},
			{"another service account's token", token("other", starting.Audience), good, http.StatusForbidden},
			{"a loopback address", token("op", starting.Audience), `{"service":"op","address":"127.0.0.1:8080"}`, http.StatusBadRequest},
			{"no such Knative Service", token("op", starting.Audience), `{"service":"nope","address":"` + podAddr + `"}`, http.StatusForbidden},
			{"not JSON", token("op", starting.Audience), `op ` + podAddr, http.StatusBadRequest},
		} {
			if got := announce(bad.tok, bad.body); got != bad.want {
				t.Errorf("%s: answered %d, want %d", bad.what, got, bad.want)
			}
		}
		time.Sleep(300 * time.Millisecond)
		if n := len(pod.all()); n != 0 {
			t.Fatalf("the pod got %d events after announcements that were refused", n)
		}
		if got := announce(token("op", starting.Audience), good); got != http.StatusNoContent {
			t.Fatalf("the pod's own announcement: answered %d, want 204", got)
		}
		ev := pod.find(t, "the event at the pod that announced itself", added("announced"))
		testkit.Eventually(t, 30*time.Second, "the route's request cancelled", func(context.Context) (bool, error) {
			_, cancelled, _ := a.seen()
			return len(cancelled) == 1 && cancelled[0] == ev.ID(), nil
		})
		if got := h.Stats().Early(); got != 1 {
			t.Errorf("early deliveries %v, want 1", got)
		}
		// The pod is found ready, then taken out (scaled to zero: draining,
		// its process still listening): the announcement is spent, and the
		// next cold start's event waits for the route.
		setEndpoint(true)
		time.Sleep(300 * time.Millisecond) // the hub's watch sees it
		setEndpoint(false)
		must(t, env.Client.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op-00001-private-abcde"}}))
		must(t, env.Client.Create(ctx, configMap(ns, "after-scale-down", nil)))
		time.Sleep(time.Second)
		if n := pod.count(added("after-scale-down")); n != 0 {
			t.Errorf("posted %d times directly to a pod that had been ready (its announcement reused)", n)
		}
		close(a.release)
		testkit.Eventually(t, 30*time.Second, "after-scale-down answered through the route", func(context.Context) (bool, error) {
			_, _, answered := a.seen()
			return len(answered) == 1, nil
		})
	})

	t.Run("starting pod refuses", func(t *testing.T) {
		env, ctx, ns := withReader(t)
		a := newActivator(t)
		pod, ip := podSink(t)
		pod.answer = func(event.Event, int) (int, http.Header) { return http.StatusServiceUnavailable, nil }
		h, _ := startHub(t, hub.Options{NoWakeups: true})
		setEndpoint := knativeSink(t, ns, "op", a, pod, ip)
		setEndpoint(false)
		must(t, env.Client.Create(ctx, configMap(ns, "refused", nil)))
		pod.find(t, "the event at the starting pod", added("refused"))
		time.Sleep(500 * time.Millisecond)
		if n := pod.count(added("refused")); n != 1 {
			t.Errorf("the pod was sent the event %d times after its 503, want once (then the route decides)", n)
		}
		close(a.release)
		testkit.Eventually(t, 30*time.Second, "the event answered through the route", func(context.Context) (bool, error) {
			_, _, answered := a.seen()
			return len(answered) == 1, nil
		})
		testkit.Eventually(t, 30*time.Second, "the send settled", func(context.Context) (bool, error) {
			return h.Stats().Sent() == 1, nil
		})
		if got := h.Stats().Early(); got != 0 {
			t.Errorf("early deliveries %v, want 0 (the pod answered 503)", got)
		}
	})

	t.Run("off", func(t *testing.T) {
		env, ctx, ns := withReader(t)
		a := newActivator(t)
		pod, ip := podSink(t)
		h, _ := startHub(t, hub.Options{NoWakeups: true, NoEarlyDelivery: true})
		setEndpoint := knativeSink(t, ns, "op", a, pod, ip)
		setEndpoint(false)
		must(t, env.Client.Create(ctx, configMap(ns, "only-route", nil)))
		time.Sleep(time.Second)
		close(a.release)
		testkit.Eventually(t, 30*time.Second, "the event answered through the route", func(context.Context) (bool, error) {
			_, _, answered := a.seen()
			return len(answered) == 1, nil
		})
		if n, early := len(pod.all()), h.Stats().Early(); n != 0 || early != 0 {
			t.Errorf("with NoEarlyDelivery the pod got %d events (early %v)", n, early)
		}
	})
}
