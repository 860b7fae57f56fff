package metacontroller

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// propagation is a customize and sync hook pair in the manner of
// Metacontroller's configmap-propagation example: each HelloWorld's
// customize answer names one ConfigMap (spec.who) and the parent's
// Namespace; sync copies the ConfigMap's data into the child <parent>-copy.
type propagation struct {
	mu    sync.Mutex
	syncs map[string]int // parent -> sync calls
	calls int            // every hook call
}

func (p *propagation) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *propagation) serve(t *testing.T) string {
	return hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Parent  *unstructured.Unstructured `json:"parent"`
			Related map[string]map[string]map[string]any
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		who, _, _ := unstructured.NestedString(req.Parent.Object, "spec", "who")
		p.mu.Lock()
		p.calls++
		p.mu.Unlock()
		switch r.URL.Path {
		case "/customize":
			_ = json.NewEncoder(w).Encode(map[string]any{"relatedResources": []any{
				map[string]any{"apiVersion": "v1", "resource": "configmaps", "names": []string{who}, "labelSelector": map[string]any{}},
				map[string]any{"apiVersion": "v1", "resource": "namespaces", "names": []string{req.Parent.GetNamespace()}},
			}})
		case "/sync":
			p.mu.Lock()
			if p.syncs == nil {
				p.syncs = map[string]int{}
			}
			p.syncs[req.Parent.GetName()]++
			p.mu.Unlock()
			data := req.Related["ConfigMap.v1"][who]["data"]
			_ = json.NewEncoder(w).Encode(map[string]any{"children": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": req.Parent.GetName() + "-copy"}, "data": data}}})
		default:
			http.NotFound(w, r)
		}
	})
}

// learningController creates a CompositeController of HelloWorlds (no
// annotation: what customize names is learned) and returns it resolved.
func learningController(t *testing.T, env *testenv.Env, name, url string) *Controller {
	t.Helper()
	ctx := context.Background()
	cc := &v1alpha1.CompositeController{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.CompositeControllerSpec{
		ParentResource: v1alpha1.CompositeControllerParentResourceRule{ResourceRule: v1alpha1.ResourceRule{APIVersion: "example.com/v1", Resource: "helloworlds"}},
		ChildResources: []v1alpha1.CompositeControllerChildResourceRule{{ResourceRule: v1alpha1.ResourceRule{APIVersion: "v1", Resource: "configmaps"},
			UpdateStrategy: &v1alpha1.CompositeControllerChildUpdateStrategy{Method: v1alpha1.ChildUpdateInPlace}}},
		Hooks: &v1alpha1.CompositeControllerHooks{Sync: webhook(url + "/sync"), Customize: webhook(url + "/customize")},
	}}
	if err := env.Client.Create(ctx, cc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cc) })
	return reload(t, env, name)
}

// reload reads the CompositeController again and resolves it, as a new
// process of the operator does.
func reload(t *testing.T, env *testenv.Env, name string) *Controller {
	t.Helper()
	cc := &v1alpha1.CompositeController{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, cc); err != nil {
		t.Fatal(err)
	}
	c, err := resolveComposite(cc, env.Client.RESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func helloWho(t *testing.T, env *testenv.Env, ns, name, who string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helloGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"who": who}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

func kindOf(cfg *Config, kind string) *kindRoles {
	for _, k := range cfg.kinds() {
		if k.gvk.Kind == kind {
			return k
		}
	}
	return nil
}

func mapped(t *testing.T, k *kindRoles, c client.Reader, obj client.Object) []string {
	t.Helper()
	return mappedIn(t, k, c, obj, obj.GetNamespace())
}

// mappedIn is the names of the parents in namespace ns obj maps to.
func mappedIn(t *testing.T, k *kindRoles, c client.Reader, obj client.Object, ns string) []string {
	t.Helper()
	reqs, err := k.mapFunc(context.Background(), c, obj)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range reqs {
		if r.Namespace != ns {
			if obj.GetNamespace() != "" {
				t.Fatalf("%s/%s maps to a parent in namespace %s", obj.GetNamespace(), obj.GetName(), r.Namespace)
			}
			continue
		}
		out = append(out, r.Name[strings.LastIndex(r.Name, "/")+1:])
	}
	sort.Strings(out)
	return out
}

// TestCustomizeNamedResourcesAreWatched: what a customize hook names is
// learned (the controller's status.relatedResources, then a restart), and
// the next process watches it, in both modes: a change of a related
// ConfigMap syncs the parent whose answer named it, and only it once that
// answer is known; a change of the Namespace both name syncs both.
func TestCustomizeNamedResourcesAreWatched(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	for _, mode := range []string{"serverless", "classic"} {
		t.Run(mode, func(t *testing.T) {
			ns := env.Namespace(t)
			configMap(t, env, ns, "source-a", nil, map[string]string{"v": "one"})
			configMap(t, env, ns, "source-b", nil, map[string]string{"v": "b"})
			helloWho(t, env, ns, "p1", "source-a")
			helloWho(t, env, ns, "p2", "source-b")
			hooks := &propagation{}
			name := uniqueName("learn-" + mode)
			c := learningController(t, env, name, hooks.serve(t))
			if len(c.Learned) != 0 {
				t.Fatalf("a new controller has learned %v", c.Learned)
			}

			// The first process: syncs, learns, asks to restart.
			var restarts []string
			r := &Reconciler{Client: env.Client, Config: &Config{Controllers: []*Controller{c}}, Hooks: &HookClient{},
				OnChange: func(why string) { restarts = append(restarts, why) }}
			res, err := r.Reconcile(ctx, CompositeKey(name, ns, "p1"))
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter == 0 {
				t.Fatal("the sync that learned a resource is not done again: a change of it before the restart would be lost")
			}
			if len(restarts) != 1 || !strings.Contains(restarts[0], "namespaces") && !strings.Contains(restarts[0], "configmaps") {
				t.Fatalf("after the customize hook named new resources, restarts %q, want one naming them", restarts)
			}
			c = reload(t, env, name)
			var learned []string
			for _, l := range c.Learned {
				learned = append(learned, l.GVR.Resource)
			}
			sort.Strings(learned)
			if !equal(learned, []string{"configmaps", "namespaces"}) {
				t.Fatalf("status.relatedResources resolves to %v, want configmaps and namespaces", learned)
			}

			// The next process watches them.
			cfg := &Config{Controllers: []*Controller{c}}
			restarts = nil
			r = &Reconciler{Client: env.Client, Config: cfg, Hooks: &HookClient{}, OnChange: func(why string) { restarts = append(restarts, why) }}
			op, err := Describe(builder.New(env.Scheme), cfg).Build(r)
			if err != nil {
				t.Fatal(err)
			}
			op.Name = uniqueName("learned-" + mode)
			var url string
			if mode == "serverless" {
				e, err := serverless.New(op, standin.NewClient(env.Client), serverless.Options{})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(e)
				t.Cleanup(srv.Close)
				url = srv.URL
				for _, p := range []string{"p1", "p2"} {
					u := &unstructured.Unstructured{}
					u.SetGroupVersionKind(helloGVK)
					u.SetNamespace(ns)
					u.SetName(p)
					deliverAs(t, url, u, "helloworlds")
				}
			} else {
				runClassic(t, env, ns, op)
			}
			copyIs := func(parent, want string) {
				testkit.Eventually(t, 30*time.Second, parent+"-copy holds "+want, func(ctx context.Context) (bool, error) {
					cm := &corev1.ConfigMap{}
					err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: parent + "-copy"}, cm)
					return err == nil && cm.Data["v"] == want, client.IgnoreNotFound(err)
				})
			}
			copyIs("p1", "one")
			copyIs("p2", "b")

			// Both parents' answers are known: the related ConfigMap of p1
			// maps to p1 alone, the Namespace to both, an unrelated
			// ConfigMap to none.
			cms, nss := kindOf(cfg, "ConfigMap"), kindOf(cfg, "Namespace")
			if nss == nil {
				t.Fatal("Namespaces, which customize named, are not watched")
			}
			if got := mapped(t, cms, env.Client, ref(ns, "source-a")); !equal(got, []string{"p1"}) {
				t.Fatalf("a change of source-a syncs %v, want p1 (whose customize answer names it)", got)
			}
			configMap(t, env, ns, "unrelated", nil, nil)
			if got := mapped(t, cms, env.Client, ref(ns, "unrelated")); len(got) != 0 {
				t.Fatalf("a change of a ConfigMap no answer names syncs %v", got)
			}
			// (parents of other tests, whose answers this process has not
			// seen, are synced too: only those of ns are checked)
			if got := mappedIn(t, nss, env.Client, ref("", ns), ns); !equal(got, []string{"p1", "p2"}) {
				t.Fatalf("a change of the Namespace syncs %v in %s, want both parents", got, ns)
			}
			fresh := kindOf(&Config{Controllers: []*Controller{c}}, "ConfigMap")
			if got := mapped(t, fresh, env.Client, ref(ns, "source-a")); !equal(got, []string{"p1", "p2"}) {
				t.Fatalf("a process that has seen no answer maps source-a to %v, want every parent in its namespace", got)
			}

			// The related ConfigMap changes: p1's copy follows.
			src := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "source-a"}, src); err != nil {
				t.Fatal(err)
			}
			src.Data["v"] = "two"
			if err := env.Client.Update(ctx, src); err != nil {
				t.Fatal(err)
			}
			if mode == "serverless" {
				deliverAs(t, url, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"namespace": ns, "name": "source-a"}}}, "configmaps")
			}
			copyIs("p1", "two")
			if len(restarts) != 0 {
				t.Fatalf("the process that watches what customize names restarted: %q", restarts)
			}
		})
	}
}

// deliverAs posts o's event as an ApiServerSource in Reference mode sends it.
func deliverAs(t *testing.T, url string, o *unstructured.Unstructured, resource string) {
	t.Helper()
	raw, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cloudevent.NewObjectEvent(cloudevent.Reference, cloudevent.Update, raw, resource)
	if err != nil {
		t.Fatal(err)
	}
	req, err := cloudevent.NewRequest(context.Background(), url, ev, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("event of %s %s answered %d (%s)", resource, o.GetName(), resp.StatusCode, resp.Header.Get(serverless.ResultHeader))
	}
}

// TestEnsureRelatedSources: a serverless operator's learned related kinds
// get a source: added to its hub Subscription, or an ApiServerSource beside
// its CompositeController's; a kind a child source already delivers whole
// gets none.
func TestEnsureRelatedSources(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	c := composite(t, env, "http://unused")
	c.Learned = []Resource{mustResolve(t, env, "v1", "namespaces"), mustResolve(t, env, "v1", "configmaps")}
	cfg := &Config{Controllers: []*Controller{c}}

	hubNS := env.Namespace(t)
	sub := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "opzero.dev/v1alpha1", "kind": "Subscription",
		"metadata": map[string]any{"namespace": hubNS, "name": Name},
		"spec": map[string]any{"operator": Name, "serviceAccountName": Name, "sink": map[string]any{"uri": "http://example.invalid"},
			"resources": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "mode": "Reference"}}}}}
	if err := env.Client.Create(ctx, sub); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second time changes nothing
		did, err := EnsureRelatedSources(ctx, env.Client, cfg, hubNS)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]int{0: 1, 1: 0}[i]; len(did) != want {
			t.Fatalf("run %d did %q, want %d changes", i, did, want)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sub), sub); err != nil {
		t.Fatal(err)
	}
	res, _, _ := unstructured.NestedSlice(sub.Object, "spec", "resources")
	var kinds []string
	for _, r := range res {
		kinds = append(kinds, r.(map[string]any)["kind"].(string))
	}
	if !equal(kinds, []string{"ConfigMap", "Namespace"}) {
		t.Fatalf("the Subscription's kinds are %v, want ConfigMap (as it was) and Namespace", kinds)
	}

	knNS := env.Namespace(t)
	if _, err := EnsureRelatedSources(ctx, env.Client, cfg, knNS); err == nil || !strings.Contains(err.Error(), "namespaces") {
		t.Fatalf("with no source at all: %v, want an error naming what is not delivered", err)
	}
	sink := map[string]any{"ref": map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": Name}}
	primary := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "sources.knative.dev/v1", "kind": "ApiServerSource",
		"metadata": map[string]any{"namespace": knNS, "name": Name + "-compositecontroller", "labels": map[string]any{"app.kubernetes.io/name": Name}},
		"spec": map[string]any{"mode": "Resource", "serviceAccountName": Name + "-compositecontroller", "sink": sink,
			"resources": []any{map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController"}}}}}
	if err := env.Client.Create(ctx, primary); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureRelatedSources(ctx, env.Client, cfg, knNS); err != nil {
		t.Fatal(err)
	}
	// The identity Knative (and opzero dev) gives the source's OIDC
	// tokens, as a session's 403 named it: the operator must allow it.
	if got, want := cfg.relatedSenders(knNS), "system:serviceaccount:"+knNS+":metacontroller-related-namespac8034feba790a587bc076063300737860"; len(got) != 1 || got[0] != want {
		t.Fatalf("the related sources' senders: %q, want [%s]", got, want)
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("sources.knative.dev/v1")
	list.SetKind("ApiServerSourceList")
	if err := env.Client.List(ctx, list, client.InNamespace(knNS)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list.Items {
		got = append(got, s.GetName())
	}
	sort.Strings(got)
	if !equal(got, []string{Name + "-compositecontroller", Name + "-related-namespace"}) {
		t.Fatalf("ApiServerSources: %v, want the CompositeController's and one for Namespaces (ConfigMaps are delivered as children)", got)
	}
	for _, s := range list.Items {
		if s.GetName() != Name+"-related-namespace" {
			continue
		}
		sa, _, _ := unstructured.NestedString(s.Object, "spec", "serviceAccountName")
		gotSink, _, _ := unstructured.NestedMap(s.Object, "spec", "sink")
		if sa != Name || !equalJSON(gotSink, sink) {
			t.Fatalf("the related source has service account %q and sink %v, want the operator's (%s) and %v", sa, gotSink, Name, sink)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestUnreadableRelatedMarksTheParent: a related resource the operator may
// not read (Forbidden) gives the parent Synced=False RelatedUnreadable and
// a Warning Event saying what to grant; the sync hook is not called.
func TestUnreadableRelatedMarksTheParent(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	helloWorld(t, env, ns, "p")
	h := &hooks{customize: `{"relatedResources":[{"apiVersion":"v1","resource":"secrets","names":["s"]}]}`}
	c := composite(t, env, h.serve(t))
	c.Related = []Resource{mustResolve(t, env, "v1", "secrets")} // already watched: nothing to learn
	rec := record.NewFakeRecorder(10)
	r := &Reconciler{Client: limitedClient(t, env), Config: &Config{Controllers: []*Controller{c}}, Hooks: &HookClient{}, Recorder: rec}
	if _, err := r.Reconcile(ctx, CompositeKey("hello", ns, "p")); err == nil {
		t.Fatal("a sync that cannot read its related objects succeeded")
	}
	if len(h.syncs) != 0 {
		t.Fatal("the sync hook was called without the related objects")
	}
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(helloGVK)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p); err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	if len(conds) != 1 || conds[0].(map[string]any)["reason"] != "RelatedUnreadable" || conds[0].(map[string]any)["status"] != "False" {
		t.Fatalf("conditions %v, want Synced=False RelatedUnreadable", conds)
	}
	evs := drain(rec)
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SyncError Sync error: RelatedUnreadable: ") || !strings.Contains(evs[0], "grant it get, list and watch") {
		t.Fatalf("events %q, want one Warning SyncError naming RelatedUnreadable, saying what to grant", evs)
	}
}

// limitedClient is a client of a user whom RBAC lets do what a sync of
// HelloWorlds with ConfigMap children does, but not read Secrets: the API
// server itself answers Forbidden.
func limitedClient(t *testing.T, env *testenv.Env) client.Client {
	t.Helper()
	ctx := context.Background()
	user := uniqueName("limited")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"example.com"}, Resources: []string{"helloworlds", "helloworlds/status"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme, Mapper: env.Client.RESTMapper()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "RBAC lets the limited user read HelloWorlds", func(ctx context.Context) (bool, error) {
		return c.List(ctx, &corev1.ConfigMapList{}) == nil, nil
	})
	return c
}
