package metacontroller

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/testenv"
)

func v2(h *v1alpha1.Hook) *v1alpha1.Hook {
	v := v1alpha1.HookVersionV2
	h.Version = &v
	return h
}

// requestNames are the names under key in a request's map field.
func requestNames(req map[string]any, field, key string) []string {
	m, _ := req[field].(map[string]any)
	byName, _ := m[key].(map[string]any)
	var out []string
	for n := range byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestHooksV2: a v2 customize hook of a namespaced parent names related
// objects in another namespace (rule namespace) or in every namespace (no
// namespace), and the v2 sync hook gets them, and its children, keyed
// "<namespace>/<name>"; the same answer from a v1 customize hook is
// refused (related objects of a namespaced parent come from its namespace).
func TestHooksV2(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns, src, src2 := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	app := map[string]string{"app": ns} // unique to this test
	configMap(t, env, src, "cm-1", app, nil)
	configMap(t, env, src, "cm-2", app, nil)
	configMap(t, env, src, "other", map[string]string{"app": "other"}, nil)
	configMap(t, env, src2, "cm-3", app, nil)
	configMap(t, env, ns, "cm-here", app, nil)
	child := func(req map[string]any) []any {
		return []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "list"}}}
	}
	for _, tc := range []struct {
		name, namespace string
		want            []string
	}{
		{"another namespace", `"namespace":"` + src + `",`, []string{src + "/cm-1", src + "/cm-2"}},
		{"every namespace", ``, []string{ns + "/cm-here", src + "/cm-1", src + "/cm-2", src2 + "/cm-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := strings.ReplaceAll(tc.name, " ", "-")
			helloWorld(t, env, ns, parent)
			h := &hooks{children: child, customize: `{"relatedResources":[{"apiVersion":"v1","resource":"configmaps",` + tc.namespace +
				`"labelSelector":{"matchLabels":{"app":"` + ns + `"}}}]}`}
			c := composite(t, env, h.serve(t))
			c.Sync, c.Customize = v2(c.Sync), v2(c.Customize)
			r := newReconciler(env, c)
			for i := 0; i < 2; i++ { // the second sync sees the child the first made
				if _, err := r.Reconcile(ctx, CompositeKey("hello", ns, parent)); err != nil {
					t.Fatal(err)
				}
			}
			req := h.lastSync(t)
			sort.Strings(tc.want)
			if got := requestNames(req, "related", "ConfigMap.v1"); !equal(got, tc.want) {
				t.Fatalf("related %v, want %v", got, tc.want)
			}
			if got := requestNames(req, "children", "ConfigMap.v1"); !equal(got, []string{ns + "/list"}) {
				t.Fatalf("children %v, want %s/list (v2 names every namespaced object by namespace/name)", got, ns)
			}
		})
	}
	t.Run("v1 refuses another namespace", func(t *testing.T) {
		helloWorld(t, env, ns, "v1")
		h := &hooks{children: child, customize: `{"relatedResources":[{"apiVersion":"v1","resource":"configmaps","namespace":"` + src + `"}]}`}
		r := newReconciler(env, composite(t, env, h.serve(t)))
		rec := record.NewFakeRecorder(10)
		r.Recorder = rec
		if _, err := r.Reconcile(ctx, CompositeKey("hello", ns, "v1")); err == nil {
			t.Fatal("a v1 customize answer naming another namespace was accepted")
		}
		if evs := drain(rec); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SyncError Sync error: HookAnswerInvalid: ") {
			t.Fatalf("events %q, want one SyncError naming HookAnswerInvalid", evs)
		}
	})
}

// TestHooksV2DecodeStrictly: a v2 hook's answer with a field its response
// does not have is refused (strict, v2's default) and the parent's child
// is untouched; responseUnMarshallMode loose accepts it, as v1 does.
func TestHooksV2DecodeStrictly(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"children": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "made"}}}, "childern": []any{}})
	})
	loose := v1alpha1.ResponseUnmarshallLoose
	for _, tc := range []struct {
		name   string
		mode   *v1alpha1.ResponseUnmarshallMode
		refuse bool
	}{{"strict", nil, true}, {"loose", &loose, false}} {
		t.Run(tc.name, func(t *testing.T) {
			helloWorld(t, env, ns, tc.name)
			c := composite(t, env, url)
			c.Customize = nil
			c.Sync = v2(webhook(url + "/sync"))
			c.Sync.Webhook.ResponseUnmarshallMode = tc.mode
			_, err := newReconciler(env, c).Reconcile(ctx, CompositeKey("hello", ns, tc.name))
			if (err != nil) != tc.refuse {
				t.Fatalf("error %v, want refused: %v", err, tc.refuse)
			}
			if tc.refuse && !strings.Contains(err.Error(), `unknown field "childern"`) {
				t.Fatalf("error %v, want it to name the unknown field", err)
			}
			cm := &unstructured.Unstructured{}
			cm.SetAPIVersion("v1")
			cm.SetKind("ConfigMap")
			err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "made"}, cm)
			if (err == nil) == tc.refuse {
				t.Fatalf("the child exists: %v, want %v", err == nil, !tc.refuse)
			}
			if !tc.refuse {
				_ = env.Client.Delete(ctx, cm)
			}
		})
	}
}

// TestHooksV2RelatedChangeSyncsParentsInOtherNamespaces: with a v2
// customize hook, a related Secret's change in one namespace syncs the
// parents of every namespace whose answer is not known (v1: only its own
// namespace's).
func TestHooksV2RelatedChangeSyncsParentsInOtherNamespaces(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns, other := env.Namespace(t), env.Namespace(t)
	helloWorld(t, env, ns, "here")
	helloWorld(t, env, other, "there")
	for _, tc := range []struct {
		name string
		v2   bool
		want int
	}{{"v1", false, 1}, {"v2", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			c := composite(t, env, "http://unused")
			if tc.v2 {
				c.Customize = v2(c.Customize)
			}
			c.Related = []Resource{mustResolve(t, env, "v1", "secrets")}
			secrets := kindOf(&Config{Controllers: []*Controller{c}}, "Secret")
			obj := &unstructured.Unstructured{}
			obj.SetAPIVersion("v1")
			obj.SetKind("Secret")
			obj.SetNamespace(ns)
			obj.SetName("s")
			reqs, err := secrets.mapFunc(ctx, env.Client, obj)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range reqs {
				if r.Namespace == ns || r.Namespace == other {
					got = append(got, r.Namespace+"/"+r.Name)
				}
			}
			if len(got) != tc.want {
				t.Fatalf("a Secret's change in %s syncs %v, want %d parent(s)", ns, got, tc.want)
			}
		})
	}
}
