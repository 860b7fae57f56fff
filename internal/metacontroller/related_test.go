package metacontroller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextv1.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{NoControllerManager: true, Scheme: scheme, KnativeCRDs: true,
		CRDDirs: []string{"../../examples/metacontroller/helloworld/crd.yaml", "../../config/metacontroller", "../../config/crd"}}))
}

var helloGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "HelloWorld"}

// hooks is a customize and sync hook pair: customize answers a fixed body,
// sync records its requests and answers the children given.
type hooks struct {
	mu        sync.Mutex
	customize string
	syncs     []map[string]any
	children  func(req map[string]any) []any
}

func (h *hooks) serve(t *testing.T) string {
	return hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		h.mu.Lock()
		defer h.mu.Unlock()
		switch r.URL.Path {
		case "/customize":
			_, _ = w.Write([]byte(h.customize))
		case "/sync":
			h.syncs = append(h.syncs, req)
			var ch []any
			if h.children != nil {
				ch = h.children(req)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"children": ch})
		default:
			http.NotFound(w, r)
		}
	})
}

func (h *hooks) lastSync(t *testing.T) map[string]any {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.syncs) == 0 {
		t.Fatal("the sync hook was not called")
	}
	return h.syncs[len(h.syncs)-1]
}

func webhook(url string) *v1alpha1.Hook {
	return &v1alpha1.Hook{Webhook: &v1alpha1.Webhook{URL: &url}}
}

func mustResolve(t *testing.T, env *testenv.Env, apiVersion, resource string) Resource {
	t.Helper()
	res, err := resolveResource(v1alpha1.ResourceRule{APIVersion: apiVersion, Resource: resource}, env.Client.RESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// composite is a CompositeController of HelloWorlds with ConfigMap children
// and a customize hook, served by url.
func composite(t *testing.T, env *testenv.Env, url string) *Controller {
	return &Controller{Kind: "CompositeController", Name: "hello", Object: map[string]any{"kind": "CompositeController"},
		Parents:   []Decorated{{Resource: mustResolve(t, env, "example.com/v1", "helloworlds")}},
		Children:  []Child{{Resource: mustResolve(t, env, "v1", "configmaps"), Method: v1alpha1.ChildUpdateInPlace}},
		Sync:      webhook(url + "/sync"),
		Customize: webhook(url + "/customize"),
	}
}

func newReconciler(env *testenv.Env, cs ...*Controller) *Reconciler {
	return &Reconciler{Client: env.Client, Config: &Config{Controllers: cs}, Hooks: &HookClient{}}
}

func configMap(t *testing.T, env *testenv.Env, ns, name string, labels map[string]string, data map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: data}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

func helloWorld(t *testing.T, env *testenv.Env, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helloGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"who": "World"}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// relatedNames is the names under key in a sync request's related map.
func relatedNames(t *testing.T, req map[string]any, key string) []string {
	t.Helper()
	rel, ok := req["related"].(map[string]any)
	if !ok {
		t.Fatalf("the sync request has no related map: %v", req["related"])
	}
	byName, ok := rel[key].(map[string]any)
	if !ok {
		t.Fatalf("related has no %s: %v", key, rel)
	}
	var out []string
	for n := range byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestCustomizeSendsTheRelatedObjectsItNames(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns, other := env.Namespace(t), env.Namespace(t)
	configMap(t, env, ns, "settings", nil, map[string]string{"who": "Related"})
	configMap(t, env, ns, "pick-a", map[string]string{"tier": "x"}, nil)
	configMap(t, env, ns, "pick-b", map[string]string{"tier": "x"}, nil)
	configMap(t, env, ns, "skip", map[string]string{"tier": "y"}, nil)
	configMap(t, env, other, "pick-elsewhere", map[string]string{"tier": "x"}, nil)
	helloWorld(t, env, ns, "p")

	h := &hooks{customize: `{"relatedResources":[
		{"apiVersion":"v1","resource":"configmaps","names":["settings","missing"]},
		{"apiVersion":"v1","resource":"configmaps","namespace":"` + ns + `","labelSelector":{"matchExpressions":[{"key":"tier","operator":"In","values":["x"]}]}}]}`}
	h.children = func(req map[string]any) []any {
		rel, _ := req["related"].(map[string]any)
		cms, _ := rel["ConfigMap.v1"].(map[string]any)
		s, _ := cms["settings"].(map[string]any)
		d, _ := s["data"].(map[string]any)
		return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "p-child"},
			"data": map[string]any{"who": d["who"]}}}
	}
	r := newReconciler(env, composite(t, env, h.serve(t)))
	if _, err := r.Reconcile(ctx, CompositeKey("hello", ns, "p")); err != nil {
		t.Fatal(err)
	}
	got := relatedNames(t, h.lastSync(t), "ConfigMap.v1")
	want := []string{"pick-a", "pick-b", "settings"}
	if !equal(got, want) {
		t.Fatalf("related ConfigMaps: got %v, want %v (names and the label selector, in the parent's namespace only)", got, want)
	}
	child := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p-child"}, child); err != nil {
		t.Fatal(err)
	}
	if child.Data["who"] != "Related" {
		t.Fatalf("the child was built from %q, want the related ConfigMap's value Related", child.Data["who"])
	}
}

func TestCustomizeOfAClusterScopedParentSeesEveryNamespace(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	a, b := env.Namespace(t), env.Namespace(t)
	configMap(t, env, a, "one", map[string]string{"spread": a}, nil)
	configMap(t, env, b, "two", map[string]string{"spread": a}, nil)
	configMap(t, env, b, "named", nil, nil)
	nsObj := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: a}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["decorate"] = "yes"
	if err := env.Client.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	h := &hooks{customize: `{"relatedResources":[
		{"apiVersion":"v1","resource":"configmaps","labelSelector":{"matchLabels":{"spread":"` + a + `"}}},
		{"apiVersion":"v1","resource":"configmaps","namespace":"` + b + `","names":["named"]},
		{"apiVersion":"v1","resource":"namespaces","names":["` + b + `"]}]}`}
	url := h.serve(t)
	d := Decorated{Resource: mustResolve(t, env, "v1", "namespaces"), Labels: mustSelector(t, "decorate=yes"), Annotations: mustSelector(t, "")}
	c := &Controller{Kind: "DecoratorController", Name: "ns-decorator", Object: map[string]any{}, Parents: []Decorated{d},
		Sync: webhook(url + "/sync"), Customize: webhook(url + "/customize")}
	r := newReconciler(env, c)
	if _, err := r.Reconcile(ctx, DecoratorKey("ns-decorator", d, "", a)); err != nil {
		t.Fatal(err)
	}
	req := h.lastSync(t)
	want := []string{a + "/one", b + "/named", b + "/two"}
	sort.Strings(want)
	if got := relatedNames(t, req, "ConfigMap.v1"); !equal(got, want) {
		t.Fatalf("related ConfigMaps of a cluster-scoped parent: got %v, want %v (keyed <namespace>/<name>)", got, want)
	}
	if got, want := relatedNames(t, req, "Namespace.v1"), []string{b}; !equal(got, want) {
		t.Fatalf("related Namespaces: got %v, want %v", got, want)
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestCustomizeGarbageMarksTheParentAndTouchesNoChild(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	for name, body := range map[string]string{
		"not JSON":           `<html>`,
		"rules not a list":   `{"relatedResources":{"a":1}}`,
		"selector and names": `{"relatedResources":[{"apiVersion":"v1","resource":"configmaps","names":["a"],"labelSelector":{"matchLabels":{"a":"b"}}}]}`,
		"unknown resource":   `{"relatedResources":[{"apiVersion":"v1","resource":"nosuchthings","names":["a"]}]}`,
		"other namespace":    `{"relatedResources":[{"apiVersion":"v1","resource":"configmaps","namespace":"kube-system","names":["a"]}]}`,
		"bad selector":       `{"relatedResources":[{"apiVersion":"v1","resource":"configmaps","labelSelector":{"matchExpressions":[{"key":"a","operator":"Bogus"}]}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			ns := env.Namespace(t)
			helloWorld(t, env, ns, "p")
			h := &hooks{customize: body, children: func(map[string]any) []any {
				return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "p-child"}}}
			}}
			r := newReconciler(env, composite(t, env, h.serve(t)))
			_, err := r.Reconcile(ctx, CompositeKey("hello", ns, "p"))
			var bad *BadAnswer
			if !errors.As(err, &bad) {
				t.Fatalf("want a BadAnswer, got %v", err)
			}
			h.mu.Lock()
			n := len(h.syncs)
			h.mu.Unlock()
			if n != 0 {
				t.Fatalf("the sync hook was called %d times after a garbage customize answer", n)
			}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p-child"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a child exists after a garbage customize answer (err %v)", err)
			}
			p := &unstructured.Unstructured{}
			p.SetGroupVersionKind(helloGVK)
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p"}, p); err != nil {
				t.Fatal(err)
			}
			conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
			if len(conds) != 1 {
				t.Fatalf("want one condition on the parent, got %v", conds)
			}
			c := conds[0].(map[string]any)
			if c["type"] != "Synced" || c["status"] != "False" || c["reason"] != "HookAnswerInvalid" {
				t.Fatalf("condition: got %v, want Synced=False HookAnswerInvalid", c)
			}
		})
	}
}

func TestRelatedResourceChangeSyncsEveryParentInItsNamespace(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns, other := env.Namespace(t), env.Namespace(t)
	helloWorld(t, env, ns, "p1")
	helloWorld(t, env, ns, "p2")
	helloWorld(t, env, other, "p3")
	c := composite(t, env, "http://unused")
	var err error
	c.Related, err = relatedResources(map[string]string{RelatedAnnotation: " v1/secrets , "}, env.Client.RESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	var secrets *kindRoles
	for _, k := range (&Config{Controllers: []*Controller{c}}).kinds() {
		if k.gvk.Kind == "Secret" {
			secrets = k
		}
	}
	if secrets == nil {
		t.Fatal("Secrets, named by the annotation, are not watched")
	}
	// Reference mode: only the name, and the object may be gone.
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "whatever"}}
	reqs, err := secrets.mapFunc(ctx, env.Client, obj)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reqs {
		got = append(got, r.Namespace+"/"+r.Name)
	}
	sort.Strings(got)
	want := []string{ns + "/composite/hello/p1", ns + "/composite/hello/p2"}
	if !equal(got, want) {
		t.Fatalf("a related Secret's change syncs %v, want %v", got, want)
	}
}

func TestRelatedAnnotationRefusesBadValues(t *testing.T) {
	env := testenv.Get(t)
	for _, v := range []string{"configmaps", "v1/nosuchthings", "/configmaps"} {
		if _, err := relatedResources(map[string]string{RelatedAnnotation: v}, env.Client.RESTMapper()); err == nil {
			t.Errorf("%s=%q was accepted", RelatedAnnotation, v)
		}
	}
	got, err := relatedResources(map[string]string{RelatedAnnotation: "v1/configmaps,apps/v1/deployments"}, env.Client.RESTMapper())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].GVK.Kind != "ConfigMap" || got[1].GVK.Kind != "Deployment" {
		t.Fatalf("got %+v, want ConfigMap and Deployment", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
