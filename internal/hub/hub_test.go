package hub_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

var scheme = runtime.NewScheme()

func TestMain(m *testing.M) {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"../../config/crd"}, KnativeCRDs: true, Scheme: scheme}))
}

// sink records the events it is sent; answer decides the status code.
type sink struct {
	*httptest.Server
	mu     sync.Mutex
	events []event.Event
	auth   []string
	epochs []string // hub.EpochHeader of each request
	answer func(ev event.Event, n int) (int, http.Header)
	conns  atomic.Int32 // connections the hub opened to it
}

func newSink(t *testing.T) *sink { return newSinkOn(t, nil) }

// newSinkOn is newSink listening on l (nil: on loopback).
func newSinkOn(t *testing.T, l net.Listener) *sink {
	s := &sink{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			t.Errorf("the hub sent something that is not a CloudEvent: %v", err)
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.events = append(s.events, *ev)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.epochs = append(s.epochs, r.Header.Get(hub.EpochHeader))
		n, answer := len(s.events), s.answer
		s.mu.Unlock()
		code, hdr := http.StatusOK, http.Header(nil)
		if answer != nil {
			code, hdr = answer(*ev, n)
		}
		for k, v := range hdr {
			rw.Header()[k] = v
		}
		rw.WriteHeader(code)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if l != nil {
		s.Listener.Close()
		s.Listener = l
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *sink) all() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

// find waits for an event that match accepts.
func (s *sink) find(t *testing.T, what string, match func(event.Event) bool) event.Event {
	t.Helper()
	var got event.Event
	testkit.Eventually(t, 30*time.Second, what, func(context.Context) (bool, error) {
		for _, ev := range s.all() {
			if match(ev) {
				got = ev
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

func (s *sink) count(match func(event.Event) bool) int {
	n := 0
	for _, ev := range s.all() {
		if match(ev) {
			n++
		}
	}
	return n
}

// describe lists the events that match, for a failure's message.
func (s *sink) describe(match func(event.Event) bool) string {
	var b strings.Builder
	for i, ev := range s.all() {
		if match(ev) {
			fmt.Fprintf(&b, "\n\t#%d %s id=%s time=%s extensions=%v", i, ev.Type(), ev.ID(), ev.Time().Format(time.RFC3339Nano), ev.Extensions())
		}
	}
	return b.String()
}

func about(typ, name string) func(event.Event) bool {
	return func(ev event.Event) bool {
		n, _ := ev.Extensions()["name"].(string)
		return ev.Type() == typ && n == name
	}
}

// startHub runs a hub until the test ends (or stop is called).
func startHub(t *testing.T, o hub.Options) (h *hub.Hub, stop func()) {
	t.Helper()
	env := testenv.Get(t)
	if o.Recheck == 0 {
		o.Recheck = time.Second
	}
	if o.Flush == 0 {
		o.Flush = 200 * time.Millisecond
	}
	o.Log = logr.FromSlogHandler(slog.NewTextHandler(testkit.LogWriter(t), nil))
	h, err := hub.New(env.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return h, stop
}

// operatorAccount makes a service account that may read rules' resources
// in ns (cluster-wide with a ClusterRole when cluster is true).
func operatorAccount(t *testing.T, ns, name string, cluster bool, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	c := testenv.Get(t).Client
	must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	if len(rules) == 0 {
		return
	}
	subj := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}}
	if cluster {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Rules: rules}
		must(t, c.Create(ctx, cr))
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name}}
		must(t, c.Create(ctx, crb))
		t.Cleanup(func() { _ = c.Delete(ctx, crb); _ = c.Delete(ctx, cr) })
		return
	}
	must(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}}))
}

// withReader is most tests' start: a namespace of their own whose service
// account "op" may read its ConfigMaps.
func withReader(t *testing.T) (*testenv.Env, context.Context, string) {
	t.Helper()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	operatorAccount(t, ns, "op", false, readConfigMaps)
	return env, context.Background(), ns
}

var readConfigMaps = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func subscription(ns, name, sinkURL string, res ...v1alpha1.SubscribedResource) *v1alpha1.Subscription {
	return &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.SubscriptionSpec{Operator: name, ServiceAccountName: "op", Sink: v1alpha1.Destination{URI: sinkURL}, Resources: res}}
}

// condition waits for the Subscription's condition typ to have status and
// reason (reason "" = any) and returns it.
func condition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	c := testenv.Get(t).Client
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("Subscription %s condition %s=%s %s", name, typ, status, reason), func(ctx context.Context) (bool, error) {
		var s v1alpha1.Subscription
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(s.Status.Conditions, typ)
		if cond == nil || cond.Status != status || (reason != "" && cond.Reason != reason) {
			return false, nil
		}
		got = *cond
		return true, nil
	})
	return got
}

// eventOn waits for a Kubernetes Event on the Subscription with reason.
func eventOn(t *testing.T, ns, name, reason string) corev1.Event {
	t.Helper()
	var got corev1.Event
	c := testenv.Get(t).Client
	testkit.Eventually(t, 30*time.Second, "an Event "+reason+" on Subscription "+name, func(ctx context.Context) (bool, error) {
		var l corev1.EventList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Kind == "Subscription" && e.InvolvedObject.Name == name && e.Reason == reason {
				got = e
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

// TestDeliversInApiServerSourceFormat: Reference and Resource mode events
// for add, update and delete, with the adapter's types, subject,
// extensions and data.
func TestDeliversInApiServerSourceFormat(t *testing.T) {
	env, ctx, ns := withReader(t)
	ref, res := newSink(t), newSink(t)
	startHub(t, hub.Options{NoWakeups: true})
	must(t, env.Client.Create(ctx, subscription(ns, "byref", ref.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: "Reference", Namespaces: []string{ns}})))
	must(t, env.Client.Create(ctx, subscription(ns, "byres", res.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: "Resource", Namespaces: []string{ns}, LabelSelector: "app=x"})))
	condition(t, ns, "byref", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	condition(t, ns, "byres", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")

	cm := configMap(ns, "one", map[string]string{"k": "v"})
	cm.Labels = map[string]string{"app": "x"}
	must(t, env.Client.Create(ctx, cm))
	must(t, env.Client.Create(ctx, configMap(ns, "other", nil)))

	ev := ref.find(t, "a ref.add of one", about("dev.knative.apiserver.ref.add", "one"))
	if want := "/apis/v1/namespaces/" + ns + "/configmaps/one"; ev.Subject() != want {
		t.Errorf("subject %q, want %q", ev.Subject(), want)
	}
	for k, want := range map[string]string{"kind": "ConfigMap", "apiversion": "v1", "name": "one", "namespace": ns} {
		if got, _ := ev.Extensions()[k].(string); got != want {
			t.Errorf("extension %s = %q, want %q", k, got, want)
		}
	}
	var data struct {
		Kind, APIVersion, Name, Namespace string
		Metadata                          cloudevent.RefMeta
		ResourceVersion                   string
	}
	must(t, json.Unmarshal(ev.Data(), &data))
	if data.Kind != "ConfigMap" || data.APIVersion != "v1" || data.Name != "one" || data.Namespace != ns || data.ResourceVersion != "" {
		t.Errorf("Reference data %+v, want the reference to ConfigMap %s/one (no resourceVersion)", data, ns)
	}
	if data.Metadata.UID != string(cm.UID) || data.Metadata.Labels["app"] != "x" {
		t.Errorf("Reference data's metadata %+v, want the object's uid and labels beside the reference", data.Metadata)
	}
	ref.find(t, "a ref.add of other", about("dev.knative.apiserver.ref.add", "other"))

	rev := res.find(t, "a resource.add of one", about("dev.knative.apiserver.resource.add", "one"))
	var obj corev1.ConfigMap
	must(t, json.Unmarshal(rev.Data(), &obj))
	if obj.APIVersion != "v1" || obj.Kind != "ConfigMap" || obj.Data["k"] != "v" || obj.ResourceVersion == "" {
		t.Errorf("Resource data is not the object: %+v", obj)
	}

	cm.Data["k"] = "w"
	must(t, env.Client.Update(ctx, cm))
	ref.find(t, "a ref.update of one", about("dev.knative.apiserver.ref.update", "one"))
	upd := res.find(t, "a resource.update of one", about("dev.knative.apiserver.resource.update", "one"))
	must(t, json.Unmarshal(upd.Data(), &obj))
	if obj.Data["k"] != "w" {
		t.Errorf("the update carries %v, want the new data", obj.Data)
	}
	must(t, env.Client.Delete(ctx, cm))
	del := ref.find(t, "a ref.delete of one", about("dev.knative.apiserver.ref.delete", "one"))
	must(t, json.Unmarshal(del.Data(), &data))
	if data.Metadata.Labels["app"] != "x" {
		t.Errorf("the Reference delete's metadata %+v, want the labels the object had (its handlers map by them)", data.Metadata)
	}
	res.find(t, "a resource.delete of one", about("dev.knative.apiserver.resource.delete", "one"))
	if n := res.count(func(ev event.Event) bool { n, _ := ev.Extensions()["name"].(string); return n == "other" }); n != 0 {
		t.Errorf("the selector app=x let %d events of ConfigMap other through", n)
	}

	// Progress is persisted for both.
	testkit.Eventually(t, 10*time.Second, "progress in status", func(ctx context.Context) (bool, error) {
		var s v1alpha1.Subscription
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "byref"}, &s); err != nil {
			return false, err
		}
		return len(s.Status.Progress) == 1 && s.Status.Progress[0].ResourceVersion != "" && s.Status.SinkURI == ref.URL, nil
	})
}

// TestReferencedBy: changes of an object no referrer names do not wake
// the operator; once one names it, they do.
// TestReferencedBy: a referenced kind's changes are delivered only for the
// objects some referrer names, and follow the referrers' changes; the
// referrer index watches the referrers itself, or is fed by the shared
// watch of the same objects when a Resource-mode subscription has one.
func TestReferencedBy(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fed          bool // the referrers are also subscribed in Resource mode
		indexWatches float64
	}{{"its own watch", false, 1}, {"fed by the shared watch", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			env, ctx, ns := withReader(t)
			s := newSink(t)
			h, _ := startHub(t, hub.Options{NoWakeups: true})
			// Referrers are ConfigMaps labelled role=referrer naming another ConfigMap in data.target.
			res := []v1alpha1.SubscribedResource{{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns},
				LabelSelector: "role!=referrer", ReferencedBy: &v1alpha1.Referrer{APIVersion: "v1", Kind: "ConfigMap", FieldPath: "data.target"}}}
			if tc.fed {
				res = append(res, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: v1alpha1.ModeResource, Namespaces: []string{ns}})
			}
			sub := subscription(ns, "refs", s.URL, res...)
			must(t, env.Client.Create(ctx, sub))
			t.Cleanup(func() { _ = env.Client.Delete(ctx, sub) }) // not served by the next subtest's hub
			referrer := configMap(ns, "referrer", map[string]string{"target": "named"})
			referrer.Labels = map[string]string{"role": "referrer"}
			must(t, env.Client.Create(ctx, referrer))
			condition(t, ns, "refs", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
			if got := h.Stats().IndexWatches(); got != tc.indexWatches {
				t.Errorf("referrer indexes with a watch of their own: %v, want %v", got, tc.indexWatches)
			}

			named, unnamed := configMap(ns, "named", nil), configMap(ns, "unnamed", nil)
			must(t, env.Client.Create(ctx, unnamed))
			must(t, env.Client.Create(ctx, named))
			s.find(t, "the named ConfigMap's add", about("dev.knative.apiserver.ref.add", "named"))
			testkit.Eventually(t, 10*time.Second, "the unnamed ConfigMap's add filtered", func(context.Context) (bool, error) { return h.Stats().Filtered() >= 1, nil })
			if n := s.count(about("dev.knative.apiserver.ref.add", "unnamed")); n != 0 {
				t.Fatalf("the unnamed ConfigMap woke the operator %d times", n)
			}
			// The referrer now names the other one. The index follows it
			// through a watch of its own, which may see the change after the
			// ConfigMap watch sees an update made right after it: update
			// until one is delivered or filtered after the index followed.
			unnamedUpdates := changed("unnamed")
			x := 0
			// settle updates unnamed once and waits until the hub has sent
			// or filtered that update; it reports whether it was sent.
			settle := func(ctx context.Context) (bool, error) {
				sent, filtered := s.count(unnamedUpdates), h.Stats().Filtered()
				x++
				unnamed.Data = map[string]string{"x": strconv.Itoa(x)}
				if err := env.Client.Update(ctx, unnamed); err != nil {
					return false, err
				}
				err := testkit.Poll(ctx, 10*time.Second, func(context.Context) (bool, error) {
					return s.count(unnamedUpdates) > sent || h.Stats().Filtered() > filtered, nil
				})
				return s.count(unnamedUpdates) > sent, err
			}
			referrer.Data["target"] = "unnamed"
			must(t, env.Client.Update(ctx, referrer))
			testkit.Eventually(t, 30*time.Second, "the now named ConfigMap's update", settle)
			// The index followed: named is no longer referenced. It was told
			// once already if the watch saw the referrer before the index
			// listed (the index then made it referenced, and the hub tells
			// that: referenced_test.go); nothing of it is sent from now on.
			namedUpdates := about("dev.knative.apiserver.ref.update", "named")
			namedBefore := s.count(namedUpdates)
			// A deleted referrer names nothing any more.
			must(t, env.Client.Delete(ctx, referrer))
			testkit.Eventually(t, 30*time.Second, "an update of the ConfigMap no referrer names any more filtered", func(ctx context.Context) (bool, error) {
				sent, err := settle(ctx)
				return !sent && err == nil, err
			})
			sent, filtered := s.count(unnamedUpdates), h.Stats().Filtered()
			unnamed.Data = map[string]string{"x": "last"}
			must(t, env.Client.Update(ctx, unnamed))
			named.Data = map[string]string{"x": "2"}
			must(t, env.Client.Update(ctx, named))
			testkit.Eventually(t, 10*time.Second, "both updates filtered", func(context.Context) (bool, error) { return h.Stats().Filtered() >= filtered+2, nil })
			time.Sleep(500 * time.Millisecond)
			if n := s.count(unnamedUpdates); n != sent {
				t.Errorf("ConfigMap unnamed: %d updates delivered after its referrer was deleted and the index followed:%s", n-sent, s.describe(unnamedUpdates))
			}
			if n := s.count(namedUpdates) - namedBefore; n != 0 {
				t.Errorf("ConfigMap named: %d updates delivered after the referrer stopped naming it:%s", n, s.describe(namedUpdates))
			}
			if n := s.count(changed("named")); n != 0 {
				t.Errorf("ConfigMap named: %d updates of its changes delivered, none while it was named:%s", n, s.describe(namedUpdates))
			}
		})
	}
}

// TestNoPrivilegeThroughTheHub: a service account that may not read
// Secrets gets nothing of them, a condition and an Event; once granted, it
// does (the hub rechecks when RBAC changes).
func TestNoPrivilegeThroughTheHub(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	startHub(t, hub.Options{NoWakeups: true, Recheck: time.Hour}) // Ready ones: only RBAC changes recheck
	must(t, env.Client.Create(ctx, subscription(ns, "secrets", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "Secret", Namespaces: []string{ns}})))
	c := condition(t, ns, "secrets", v1alpha1.SubscriptionAuthorized, metav1.ConditionFalse, "Forbidden")
	if !strings.Contains(c.Message, "system:serviceaccount:"+ns+":op may not get secrets") {
		t.Errorf("the condition does not say who may not read what: %q", c.Message)
	}
	condition(t, ns, "secrets", v1alpha1.SubscriptionReady, metav1.ConditionFalse, "Forbidden")
	eventOn(t, ns, "secrets", "Forbidden")
	must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hidden"}}))
	time.Sleep(time.Second)
	if n := len(s.all()); n != 0 {
		t.Fatalf("a forbidden Subscription got %d events", n)
	}
	// Granted: the RBAC change makes the hub check again.
	rule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}
	must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secrets"}, Rules: []rbacv1.PolicyRule{rule}}))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secrets"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "op"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "secrets"}}))
	condition(t, ns, "secrets", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shown"}}))
	// Once granted, changes since the Subscription was written are
	// delivered (the operator may read them now): nothing is lost.
	s.find(t, "the Secret's add once granted", about("dev.knative.apiserver.ref.add", "shown"))
	s.find(t, "the Secret created while forbidden, once granted", about("dev.knative.apiserver.ref.add", "hidden"))

	// Revoked: a Ready Subscription is checked again when RBAC changes
	// (the periodic recheck is an hour here), and gets nothing more.
	must(t, env.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secrets"}}))
	condition(t, ns, "secrets", v1alpha1.SubscriptionAuthorized, metav1.ConditionFalse, "Forbidden")
	must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after-revoke"}}))
	time.Sleep(time.Second)
	if n := s.count(about("dev.knative.apiserver.ref.add", "after-revoke")); n != 0 {
		t.Errorf("a Secret created after the grant was revoked was delivered %d times", n)
	}
}

// TestBadInputStaysLocal: an unknown kind, a selector that does not parse
// and a sink that does not resolve each get a condition and an Event; a
// good Subscription next to them is served.
func TestBadInputStaysLocal(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	startHub(t, hub.Options{NoWakeups: true})
	cm := v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}}
	unknown := subscription(ns, "unknown", s.URL, v1alpha1.SubscribedResource{APIVersion: "example.com/v1", Kind: "Nothing"})
	badSel := cm
	badSel.LabelSelector = "a in (b"
	selector := subscription(ns, "selector", s.URL, badSel)
	nosink := subscription(ns, "nosink", "", cm)
	nosink.Spec.Sink = v1alpha1.Destination{Ref: &v1alpha1.KReference{APIVersion: "v1", Kind: "Service", Name: "missing"}}
	badSched := subscription(ns, "schedule", s.URL, cm)
	badSched.Spec.Sweeps = []v1alpha1.Sweep{{Name: "s", Schedule: "@every 1s"}}
	for _, o := range []*v1alpha1.Subscription{unknown, selector, nosink, badSched, subscription(ns, "good", s.URL, cm)} {
		must(t, env.Client.Create(ctx, o))
	}
	condition(t, ns, "unknown", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "UnknownKind")
	condition(t, ns, "selector", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "InvalidSelector")
	condition(t, ns, "nosink", v1alpha1.SubscriptionSinkResolved, metav1.ConditionFalse, "SinkNotFound")
	condition(t, ns, "schedule", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "InvalidSchedule")
	for name, reason := range map[string]string{"unknown": "UnknownKind", "selector": "InvalidSelector", "nosink": "SinkNotFound", "schedule": "InvalidSchedule"} {
		condition(t, ns, name, v1alpha1.SubscriptionReady, metav1.ConditionFalse, reason)
		eventOn(t, ns, name, reason)
	}
	condition(t, ns, "good", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	must(t, env.Client.Create(ctx, configMap(ns, "c", nil)))
	ev := s.find(t, "the good Subscription's event", about("dev.knative.apiserver.ref.add", "c"))
	_ = ev
	time.Sleep(500 * time.Millisecond)
	if n := s.count(about("dev.knative.apiserver.ref.add", "c")); n != 1 {
		t.Errorf("ConfigMap c was delivered %d times, want once (only the good Subscription is served)", n)
	}
}

// TestResumesFromProgress: changes made while the hub is down are
// delivered when it comes back, from its persisted progress; from a
// progress the API server no longer has (410), by a list of what changed
// and a sweep tick at once.
func TestResumesFromProgress(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	_, stop := startHub(t, hub.Options{NoWakeups: true})
	sub := subscription(ns, "resume", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: "Resource", Namespaces: []string{ns}})
	sub.Spec.Sweeps = []v1alpha1.Sweep{{Name: "resume-sweep", Schedule: "@yearly"}}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "resume", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	a := configMap(ns, "a", map[string]string{"v": "0"})
	must(t, env.Client.Create(ctx, a))
	s.find(t, "a's add", about("dev.knative.apiserver.resource.add", "a"))
	progress := func() string {
		var got v1alpha1.Subscription
		must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "resume"}, &got))
		if len(got.Status.Progress) == 0 {
			return ""
		}
		return got.Status.Progress[0].ResourceVersion
	}
	testkit.Eventually(t, 10*time.Second, "a's add in the progress", func(context.Context) (bool, error) { return progress() == a.ResourceVersion, nil })
	stop()

	// Down: an update and a new object.
	a.Data["v"] = "1"
	must(t, env.Client.Update(ctx, a))
	must(t, env.Client.Create(ctx, configMap(ns, "b", nil)))
	_, stop = startHub(t, hub.Options{NoWakeups: true})
	upd := s.find(t, "a's update made while the hub was down", about("dev.knative.apiserver.resource.update", "a"))
	var got corev1.ConfigMap
	must(t, json.Unmarshal(upd.Data(), &got))
	if got.Data["v"] != "1" {
		t.Errorf("the update carries %v", got.Data)
	}
	s.find(t, "b's add made while the hub was down", about("dev.knative.apiserver.resource.add", "b"))
	stop()

	// Down, and the progress is older than anything the API server keeps.
	var cur v1alpha1.Subscription
	must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "resume"}, &cur))
	for i := range cur.Status.Progress {
		cur.Status.Progress[i].ResourceVersion = "2"
	}
	must(t, env.Client.Status().Update(ctx, &cur))
	c := configMap(ns, "c", nil)
	must(t, env.Client.Create(ctx, c))
	compact(t, env.EtcdURL, c.ResourceVersion)
	must(t, env.RestartAPIServer(ctx)) // its watch cache forgets what etcd compacted
	before := s.count(func(ev event.Event) bool { return ev.Type() == "dev.knative.sources.ping" })
	startHub(t, hub.Options{NoWakeups: true})
	s.find(t, "c, created while the hub was down, sent after the relist", about("dev.knative.apiserver.resource.update", "c"))
	ping := s.find(t, "a sweep tick at once after the relist", func(ev event.Event) bool {
		return ev.Type() == "dev.knative.sources.ping" && s.count(func(ev event.Event) bool { return ev.Type() == "dev.knative.sources.ping" }) > before
	})
	if want := "/apis/v1/namespaces/" + ns + "/pingsources/resume-sweep"; ping.Source() != want {
		t.Errorf("sweep source %q, want %q", ping.Source(), want)
	}
}

// TestDelivery: Retry-After, 503 and 502 are retried, a 400 goes to the
// dead-letter sink with Knative's extensions, a 500 (the operator's own
// retry) is final, tokens carry the audience.
func TestDelivery(t *testing.T) {
	env, ctx, ns := withReader(t)
	must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hub"}}))
	s, dls := newSink(t), newSink(t)
	s.answer = func(ev event.Event, n int) (int, http.Header) {
		name, _ := ev.Extensions()["name"].(string)
		switch {
		case name == "refused":
			return http.StatusBadRequest, nil
		case n == 1:
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}
		case n == 2:
			return http.StatusBadGateway, nil
		case name == "failing":
			return http.StatusInternalServerError, nil // failed, retry scheduled by the operator itself
		}
		return http.StatusOK, nil
	}
	startHub(t, hub.Options{NoWakeups: true, Identity: types.NamespacedName{Namespace: ns, Name: "hub"}})
	sub := subscription(ns, "retry", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})
	sub.Spec.Sink.Audience = "opzero:test"
	sub.Spec.Delivery = &v1alpha1.Delivery{Retry: ptr.To[int32](3), BackoffDelay: "PT0.05S", DeadLetterSink: &v1alpha1.Destination{URI: dls.URL}}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "retry", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	start := time.Now()
	must(t, env.Client.Create(ctx, configMap(ns, "flaky", nil)))
	s.find(t, "flaky delivered after a 503 and a 502", func(ev event.Event) bool {
		return about("dev.knative.apiserver.ref.add", "flaky")(ev) && len(s.all()) >= 3
	})
	if d := time.Since(start); d < time.Second {
		t.Errorf("delivered %v after the 503 with Retry-After: 1: the hub did not wait", d)
	}
	must(t, env.Client.Create(ctx, configMap(ns, "refused", nil)))
	dl := dls.find(t, "refused dead-lettered", about("dev.knative.apiserver.ref.add", "refused"))
	if code, _ := dl.Extensions()["knativeerrorcode"].(string); code != "400" {
		t.Errorf("knativeerrorcode %q, want 400", code)
	}
	if n := s.count(about("dev.knative.apiserver.ref.add", "refused")); n != 1 {
		t.Errorf("a 400 was sent %d times, want once (not retried)", n)
	}
	// A 500 is the operator's own retry: sent once, not dead-lettered.
	must(t, env.Client.Create(ctx, configMap(ns, "failing", nil)))
	s.find(t, "failing sent", about("dev.knative.apiserver.ref.add", "failing"))
	must(t, env.Client.Create(ctx, configMap(ns, "later", nil)))
	s.find(t, "a later event sent", about("dev.knative.apiserver.ref.add", "later"))
	time.Sleep(300 * time.Millisecond) // three of the backoff's first delays
	if n := s.count(about("dev.knative.apiserver.ref.add", "failing")); n != 1 {
		t.Errorf("a 500 was sent %d times, want once (the operator scheduled its retry)", n)
	}
	if n := dls.count(about("dev.knative.apiserver.ref.add", "failing")); n != 0 {
		t.Errorf("a 500 was dead-lettered %d times", n)
	}
	s.mu.Lock()
	tok := s.auth[0]
	s.mu.Unlock()
	claims := jwtClaims(t, strings.TrimPrefix(tok, "Bearer "))
	if aud := fmt.Sprint(claims["aud"]); aud != "[opzero:test]" {
		t.Errorf("token audience %s, want [opzero:test]", aud)
	}
	if sub := claims["sub"]; sub != "system:serviceaccount:"+ns+":hub" {
		t.Errorf("token subject %v, want the hub's service account", sub)
	}
}

// TestDeliveryKeepsConnections: deliveries at a Subscription's full
// concurrency reuse their connections to the sink; the hub does not dial
// one per event (net/http keeps 2 idle connections per host by default).
func TestDeliveryKeepsConnections(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	gate := make(chan struct{}) // held until every object exists: a backlog keeps every delivery slot busy
	s.answer = func(event.Event, int) (int, http.Header) {
		<-gate
		time.Sleep(10 * time.Millisecond)
		return http.StatusOK, nil
	}
	startHub(t, hub.Options{NoWakeups: true})
	const concurrency, objects = 8, 120
	sub := subscription(ns, "busy", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})
	sub.Spec.Delivery = &v1alpha1.Delivery{Concurrency: ptr.To[int32](concurrency)}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "busy", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	var wg sync.WaitGroup
	for i := range objects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := env.Client.Create(ctx, configMap(ns, fmt.Sprintf("cm-%03d", i), nil)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(gate)
	testkit.Eventually(t, time.Minute, "every ConfigMap delivered", func(context.Context) (bool, error) {
		return s.count(func(ev event.Event) bool { return ev.Type() == "dev.knative.apiserver.ref.add" }) >= objects, nil
	})
	// At most one connection per delivery at once, and a few dialed while
	// another was being freed.
	if n := s.conns.Load(); n > concurrency+concurrency/2 {
		t.Errorf("the hub opened %d connections to the sink for %d events at concurrency %d: it does not keep them", n, objects, concurrency)
	} else {
		t.Logf("%d connections for %d events at concurrency %d", n, objects, concurrency)
	}
}

// TestModesNotCoalesced: a change waiting behind a delivery of the same
// object is replaced by a newer one of the same mode, but a Subscription
// that has an object in both modes gets both events (the Resource-mode
// one had replaced the Reference-mode one: TestReferencedBy, fed by the
// shared watch, lost the named ConfigMap's add under load).
func TestModesNotCoalesced(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	gate := make(chan struct{})
	s.answer = func(ev event.Event, _ int) (int, http.Header) {
		if n, _ := ev.Extensions()["name"].(string); n == "blocker" {
			<-gate
		}
		return http.StatusOK, nil
	}
	startHub(t, hub.Options{NoWakeups: true})
	sub := subscription(ns, "both", s.URL,
		v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}},
		v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: v1alpha1.ModeResource, Namespaces: []string{ns}})
	sub.Spec.Delivery = &v1alpha1.Delivery{Concurrency: ptr.To[int32](1)} // one delivery at a time: the rest wait
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "both", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	must(t, env.Client.Create(ctx, configMap(ns, "blocker", nil)))
	s.find(t, "the blocker's first event, held by the sink", func(ev event.Event) bool { n, _ := ev.Extensions()["name"].(string); return n == "blocker" })
	must(t, env.Client.Create(ctx, configMap(ns, "x", nil)))
	time.Sleep(time.Second) // both watches see x and queue its events behind the blocker
	close(gate)
	s.find(t, "x's Reference-mode add", about("dev.knative.apiserver.ref.add", "x"))
	s.find(t, "x's Resource-mode add", about("dev.knative.apiserver.resource.add", "x"))
}

// compact compacts etcd up to rv, as kube-apiserver does every 5 minutes:
// watches from before it get 410 Gone.
func compact(t *testing.T, etcd, rv string) {
	t.Helper()
	body := strings.NewReader(`{"revision":"` + rv + `","physical":true}`)
	resp, err := http.Post(etcd+"/v3/kv/compaction", "application/json", body)
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("compacting etcd at %s: %s %s", rv, resp.Status, b)
	}
}

func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(b, &m))
	return m
}

// TestSweepsAndWakeups: sweep ticks on their schedule, and the operator's
// Wakeups delivered to its Subscription's sink, not to the record's.
func TestSweepsAndWakeups(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	startHub(t, hub.Options{})
	sub := subscription(ns, "timer", s.URL)
	sub.Spec.Sweeps = []v1alpha1.Sweep{{Name: "timer-full-sweep", Schedule: "* * * * * *", Data: `{"sweep":"all"}`}}
	sub.Spec.Wakeups = true
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "timer", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	ping := s.find(t, "a sweep tick", func(ev event.Event) bool { return ev.Type() == "dev.knative.sources.ping" })
	if string(ping.Data()) != `{"sweep":"all"}` || ping.Source() != "/apis/v1/namespaces/"+ns+"/pingsources/timer-full-sweep" {
		t.Errorf("sweep tick source %q data %q", ping.Source(), ping.Data())
	}
	store := wakeup.NewStore(env.Client, wakeup.StoreOptions{Operator: "timer", Target: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Sink: "http://timer." + ns + ".svc.cluster.local"})
	must(t, store.Requeue(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "x"}}, 0))
	other := wakeup.NewStore(env.Client, wakeup.StoreOptions{Operator: "someone-else", Target: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Sink: s.URL})
	must(t, other.Requeue(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "y"}}, 0))
	wk := s.find(t, "the wakeup", func(ev event.Event) bool { return ev.Type() == "dev.opzero.wakeup" })
	if n, _ := wk.Extensions()["targetname"].(string); n != "x" {
		t.Errorf("wakeup for %q, want x", n)
	}
	testkit.Eventually(t, 10*time.Second, "the delivered record deleted", func(ctx context.Context) (bool, error) {
		var l v1alpha1.WakeupList
		if err := env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(l.Items) == 1 && l.Items[0].Spec.Operator == "someone-else", nil
	})
	time.Sleep(time.Second)
	if n := s.count(func(ev event.Event) bool { return ev.Type() == "dev.opzero.wakeup" }); n != 1 {
		t.Errorf("%d wakeups delivered, want 1 (the other operator has no Subscription)", n)
	}
}

// TestSinkMoves: a Knative Service sink is resolved through its
// status.address.url; when that address changes, failed sends read it
// again and go to the new one, without waiting for the periodic recheck.
func TestSinkMoves(t *testing.T) {
	env, ctx, ns := withReader(t)
	old, moved := newSink(t), newSink(t)
	old.answer = func(event.Event, int) (int, http.Header) { return http.StatusNotFound, nil } // gone, as a removed route answers
	ksvc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"namespace": ns, "name": "op"},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"image": "ko://example.com/op"}}}}}}}
	must(t, env.Client.Create(ctx, ksvc))
	setAddress := func(url string) {
		t.Helper()
		must(t, unstructured.SetNestedField(ksvc.Object, url, "status", "address", "url"))
		must(t, env.Client.Status().Update(ctx, ksvc))
	}
	setAddress(old.URL)
	startHub(t, hub.Options{NoWakeups: true, Recheck: time.Hour})
	sub := subscription(ns, "moves", "", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})
	sub.Spec.Sink = v1alpha1.Destination{Ref: &v1alpha1.KReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "op"}}
	sub.Spec.Delivery = &v1alpha1.Delivery{BackoffDelay: "PT0.05S"}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "moves", v1alpha1.SubscriptionSinkResolved, metav1.ConditionTrue, "")
	setAddress(moved.URL)
	must(t, env.Client.Create(ctx, configMap(ns, "after-move", nil)))
	moved.find(t, "the event at the sink's new address", about("dev.knative.apiserver.ref.add", "after-move"))
	if old.count(about("dev.knative.apiserver.ref.add", "after-move")) == 0 {
		t.Fatal("the old address was never tried: the test proves nothing about reading the address again")
	}
}

// TestSkipObserved: with skipObserved, the hub does not send the updates
// the operator's generation-aware skipping would acknowledge without a
// reconcile (here the echo of a status write, and an annotation change the
// operator did not opt into), and sends every other change: a new
// generation, a label change it opted into, a finalizer. The watched kind
// is the Subscription itself: the hub writes observedGeneration on it.
// skipObserved on a Reference-mode resource is refused.
func TestSkipObserved(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	operatorAccount(t, ns, "op", false, rbacv1.PolicyRule{APIGroups: []string{"opzero.dev"}, Resources: []string{"subscriptions"}, Verbs: []string{"get", "list", "watch"}})
	s := newSink(t)
	startHub(t, hub.Options{NoWakeups: true})
	subs := v1alpha1.SubscribedResource{APIVersion: "opzero.dev/v1alpha1", Kind: "Subscription", Mode: v1alpha1.ModeResource, Namespaces: []string{ns},
		LabelSelector: "role=target", SkipObserved: &v1alpha1.SkipObserved{Labels: true}}
	must(t, env.Client.Create(ctx, subscription(ns, "watcher", s.URL, subs)))
	condition(t, ns, "watcher", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	ref := subs
	ref.Mode = v1alpha1.ModeReference
	must(t, env.Client.Create(ctx, subscription(ns, "bad", s.URL, ref)))
	cond := condition(t, ns, "bad", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "InvalidSpec")
	if !strings.Contains(cond.Message, "skipObserved needs mode Resource") {
		t.Errorf("skipObserved in Reference mode: %q, want it to say it needs mode Resource", cond.Message)
	}

	// The target names an unknown kind: the hub writes its status (a
	// condition and observedGeneration 1) and serves nothing for it.
	target := subscription(ns, "target", s.URL, v1alpha1.SubscribedResource{APIVersion: "example.com/v1", Kind: "Nothing"})
	target.Labels = map[string]string{"role": "target"}
	must(t, env.Client.Create(ctx, target))
	s.find(t, "the target's add", about("dev.knative.apiserver.resource.add", "target"))
	condition(t, ns, "target", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "UnknownKind")
	updates := func() int { return s.count(about("dev.knative.apiserver.resource.update", "target")) }
	// settle lets whatever the hub would send for the last change arrive.
	settle := func() { time.Sleep(time.Second) }
	change := func(what string, mutate func(*v1alpha1.Subscription)) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &v1alpha1.Subscription{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(target), cur); err != nil {
				return err
			}
			mutate(cur)
			return env.Client.Update(ctx, cur)
		}))
		settle()
	}
	expect := func(what string, want int) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, what, func(context.Context) (bool, error) { return updates() >= want, nil })
		settle()
		if got := updates(); got != want {
			t.Fatalf("%s: %d updates of the target sent, want %d", what, got, want)
		}
	}
	settle()
	expect("the status write's echo is not sent", 0)
	change("an annotation", func(o *v1alpha1.Subscription) { o.Annotations = map[string]string{"a": "1"} })
	expect("an annotation change (not opted into) is not sent", 0)
	change("a label", func(o *v1alpha1.Subscription) { o.Labels["l"] = "1" })
	expect("a label change (opted into) is sent", 1)
	change("the spec", func(o *v1alpha1.Subscription) { o.Spec.Operator = "other" })
	expect("a new generation is sent, its status echo is not", 2)
	change("a finalizer", func(o *v1alpha1.Subscription) { o.Finalizers = []string{"example.com/f"} })
	expect("a finalizer change is sent", 3)
	change("the finalizer gone", func(o *v1alpha1.Subscription) { o.Finalizers = nil })
	expect("a finalizer's removal is sent", 4)
}

// TestRetrySupersededByNewerChange: a delivery that is being retried is
// not sent again once a newer change of the same object waits behind it:
// the stale copy, sent after the newer state had been reconciled another
// way (a sweep), would be reconciled as current (the fault soak saw a
// child re-created for a parent deleted meanwhile, and left behind).
func TestRetrySupersededByNewerChange(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	version := func(ev event.Event) string {
		var cm corev1.ConfigMap
		_ = json.Unmarshal(ev.Data(), &cm)
		return cm.Data["v"]
	}
	s.answer = func(ev event.Event, _ int) (int, http.Header) {
		if version(ev) == "1" {
			return http.StatusServiceUnavailable, nil // the operator is down for the first version
		}
		return http.StatusOK, nil
	}
	startHub(t, hub.Options{NoWakeups: true})
	sub := subscription(ns, "stale", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: v1alpha1.ModeResource, Namespaces: []string{ns}})
	sub.Spec.Delivery = &v1alpha1.Delivery{Retry: ptr.To[int32](6), BackoffDelay: "PT0.3S"}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "stale", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	cm := configMap(ns, "obj", map[string]string{"v": "1"})
	must(t, env.Client.Create(ctx, cm))
	s.find(t, "the first version, refused", func(ev event.Event) bool { return version(ev) == "1" })
	cm.Data = map[string]string{"v": "2"}
	must(t, env.Client.Update(ctx, cm))
	s.find(t, "the second version", func(ev event.Event) bool { return version(ev) == "2" })
	time.Sleep(time.Second) // a retry of the first would be due by now
	var seq []string
	for _, ev := range s.all() {
		if n, _ := ev.Extensions()["name"].(string); n == "obj" {
			seq = append(seq, version(ev))
		}
	}
	if last := seq[len(seq)-1]; last != "2" || slices.Index(seq, "2") != len(seq)-1 {
		t.Errorf("versions sent, in order: %v; want the first one's retries to stop at the second, sent last", seq)
	}
	if n := strings.Count(strings.Join(seq, ""), "1"); n > 2 {
		t.Errorf("the first version was sent %d times (%v): its retries went on with a newer change waiting", n, seq)
	}
}

// TestAntiEntropySweepWhenTheHubCannotVouch: the anti-entropy sweep (no
// data) is sent once at the start, then not while every event is answered
// as reconciled: the operator is not woken for it. An event answered 500
// (a retry in the operator's memory, which dies with it) or answered
// before its reconcile (admitted) brings the next tick back; the full
// sweep (data) is sent on its schedule whatever.
func TestAntiEntropySweepWhenTheHubCannotVouch(t *testing.T) {
	env, ctx, ns := withReader(t)
	s := newSink(t)
	h, _ := startHub(t, hub.Options{NoWakeups: true})
	sub := subscription(ns, "op", s.URL, v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})
	sub.Spec.Sweeps = []v1alpha1.Sweep{{Name: "op-sweep", Schedule: "* * * * * *"}, {Name: "op-full-sweep", Schedule: "* * * * * *", Data: `{"sweep":"all"}`}}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "op", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	sweeps := func(name string) func(event.Event) bool {
		return func(ev event.Event) bool {
			return ev.Type() == "dev.knative.sources.ping" && strings.HasSuffix(ev.Source(), "/pingsources/"+name)
		}
	}
	s.find(t, "the first anti-entropy sweep", sweeps("op-sweep"))
	full := s.count(sweeps("op-full-sweep"))
	time.Sleep(3500 * time.Millisecond) // three ticks of each
	if n := s.count(sweeps("op-sweep")); n != 1 {
		t.Fatalf("%d anti-entropy sweeps sent while nothing failed, want the first only", n)
	}
	if n := s.count(sweeps("op-full-sweep")); n < full+2 {
		t.Errorf("full sweeps %d then %d over 3.5 s: they go on their schedule whatever", full, n)
	}
	if h.Stats().SweepsSkipped() < 2 {
		t.Errorf("sweeps skipped %v, want the ticks not sent counted", h.Stats().SweepsSkipped())
	}

	for i, answer := range []func(event.Event, int) (int, http.Header){
		func(event.Event, int) (int, http.Header) { return http.StatusInternalServerError, nil },
		func(event.Event, int) (int, http.Header) {
			return http.StatusOK, http.Header{"Opzero-Result": []string{"admitted 1 key(s): update ConfigMap"}}
		},
	} {
		before := s.count(sweeps("op-sweep"))
		s.mu.Lock()
		s.answer = func(ev event.Event, n int) (int, http.Header) {
			if ev.Type() == "dev.knative.sources.ping" {
				return http.StatusOK, nil
			}
			return answer(ev, n)
		}
		s.mu.Unlock()
		must(t, env.Client.Create(ctx, configMap(ns, fmt.Sprintf("cm-%d", i), nil)))
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("an anti-entropy sweep after answer %d", i), func(context.Context) (bool, error) {
			return s.count(sweeps("op-sweep")) > before, nil
		})
		s.mu.Lock()
		s.answer = nil
		s.mu.Unlock()
	}
}
