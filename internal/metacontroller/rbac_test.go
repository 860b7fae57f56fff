package metacontroller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/description"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestRBACChildrenGetBindAndEscalate: children (attachments) that are
// role bindings give the operator bind on roles and cluster roles; roles,
// escalate on those it writes; with a warning saying why. Other children
// add neither.
func TestRBACChildrenGetBindAndEscalate(t *testing.T) {
	controller := func(children string) string {
		return `apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: binder}
spec:
  resources: [{apiVersion: v1, resource: namespaces}]
  attachments: [` + children + `]
  hooks: {sync: {webhook: {url: "http://hook.ns/sync"}}}
`
	}
	for _, tc := range []struct {
		name, children string
		bind, escalate []string
	}{
		{"bindings", `{apiVersion: rbac.authorization.k8s.io/v1, resource: rolebindings}`, []string{"clusterroles", "roles"}, nil},
		{"roles", `{apiVersion: rbac.authorization.k8s.io/v1, resource: clusterroles}`, nil, []string{"clusterroles"}},
		{"both", `{apiVersion: rbac.authorization.k8s.io/v1, resource: roles}, {apiVersion: rbac.authorization.k8s.io/v1, resource: clusterrolebindings}`,
			[]string{"clusterroles", "roles"}, []string{"roles"}},
		{"none", `{apiVersion: v1, resource: configmaps}`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir+"/c.yaml", controller(tc.children))
			cfg, err := LoadFiles([]string{dir})
			if err != nil {
				t.Fatal(err)
			}
			d := &description.Controller{}
			completeDescription(d, cfg)
			if got := rbacVerb(d.Rules, "bind"); strings.Join(got, ",") != strings.Join(tc.bind, ",") {
				t.Fatalf("bind on %v, want %v", got, tc.bind)
			}
			if got := rbacVerb(d.Rules, "escalate"); strings.Join(got, ",") != strings.Join(tc.escalate, ",") {
				t.Fatalf("escalate on %v, want %v", got, tc.escalate)
			}
			warned := false
			for _, w := range d.Warnings {
				warned = warned || strings.Contains(w, "DecoratorController binder returns") && strings.Contains(w, "Metacontroller's own ClusterRole")
			}
			if warned != (tc.bind != nil || tc.escalate != nil) {
				t.Fatalf("warnings %q: a line saying why: %v", d.Warnings, warned)
			}
		})
	}
}

// rbacVerb is the RBAC resources the rules grant verb on.
func rbacVerb(rules []description.Rule, verb string) []string {
	var out []string
	for _, r := range rules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == rbacGroup && len(r.Verbs) == 1 && r.Verbs[0] == verb {
			out = append(out, r.Resources...)
		}
	}
	return out
}

// TestRoleBindingChildNeedsBind: a hook that returns a RoleBinding to a
// ClusterRole whose permissions the operator does not hold. With the RBAC
// `opzero manifests` derives, the API server creates it; without bind it
// refuses, and the parent gets a Warning Event ApplyForbidden and
// Synced=False; the sync fails (the engine retries it with backoff) and
// failing again writes nothing more to the parent (no hot loop of its own
// writes).
func TestRoleBindingChildNeedsBind(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	target := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-secret-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}
	if err := env.Client.Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), target) })
	h := &hooks{children: func(req map[string]any) []any {
		parent, _ := req["parent"].(map[string]any)
		meta, _ := parent["metadata"].(map[string]any)
		return []any{map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
			"metadata": map[string]any{"name": meta["name"].(string) + "-readers"},
			"roleRef":  map[string]any{"apiGroup": rbacGroup, "kind": "ClusterRole", "name": target.Name},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "default", "namespace": ns}}}}
	}}
	url := h.serve(t)
	c := &Controller{Kind: "CompositeController", Name: "binder", Object: map[string]any{"kind": "CompositeController"},
		Parents:  []Decorated{{Resource: mustResolve(t, env, "example.com/v1", "helloworlds")}},
		Children: []Child{{Resource: mustResolve(t, env, "rbac.authorization.k8s.io/v1", "rolebindings"), Method: v1alpha1.ChildUpdateInPlace}},
		Sync:     webhook(url + "/sync")}
	cfg := &Config{Controllers: []*Controller{c}}
	d := &description.Controller{}
	completeDescription(d, cfg)

	t.Run("derived", func(t *testing.T) {
		helloWorld(t, env, ns, "with-bind")
		r := &Reconciler{Client: clientWith(t, env, ns+"-derived", d.Rules), Config: cfg, Hooks: &HookClient{}}
		if _, err := r.Reconcile(ctx, CompositeKey("binder", ns, "with-bind")); err != nil {
			t.Fatalf("a sync with the derived RBAC: %v", err)
		}
		rb := &rbacv1.RoleBinding{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "with-bind-readers"}, rb); err != nil {
			t.Fatal(err)
		}
		if rb.RoleRef.Name != target.Name {
			t.Fatalf("the RoleBinding refers to %s", rb.RoleRef.Name)
		}
	})
	t.Run("without bind", func(t *testing.T) {
		var noBind []description.Rule
		for _, rule := range d.Rules {
			if len(rule.Verbs) != 1 || rule.Verbs[0] != "bind" {
				noBind = append(noBind, rule)
			}
		}
		helloWorld(t, env, ns, "without-bind")
		rec := record.NewFakeRecorder(10)
		r := &Reconciler{Client: clientWith(t, env, ns+"-nobind", noBind), Config: cfg, Hooks: &HookClient{}, Recorder: rec}
		key := CompositeKey("binder", ns, "without-bind")
		_, err := r.Reconcile(ctx, key)
		if err == nil || errors.Is(err, reconcile.TerminalError(nil)) {
			t.Fatalf("a sync refused by RBAC: error %v, want one retried with backoff (not terminal)", err)
		}
		evs := drain(rec)
		if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SyncError Sync error: ApplyForbidden: ") || !strings.Contains(evs[0], "grant it bind") {
			t.Fatalf("events %q, want one Warning SyncError naming ApplyForbidden saying what to grant", evs)
		}
		p := &unstructured.Unstructured{}
		p.SetGroupVersionKind(helloGVK)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "without-bind"}, p); err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		if len(conds) != 1 || conds[0].(map[string]any)["reason"] != "ApplyForbidden" || conds[0].(map[string]any)["status"] != "False" {
			t.Fatalf("conditions %v, want Synced=False ApplyForbidden", conds)
		}
		rv := p.GetResourceVersion()
		if _, err := r.Reconcile(ctx, key); err == nil {
			t.Fatal("the second sync succeeded")
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "without-bind"}, p); err != nil {
			t.Fatal(err)
		}
		if p.GetResourceVersion() != rv {
			t.Fatal("failing again wrote the parent again: its own write would sync it again, hot")
		}
	})
}

// clientWith is a client of a user whom RBAC grants rules (and Events).
func clientWith(t *testing.T, env *testenv.Env, user string, rules []description.Rule) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}}
	for _, r := range rules {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs})
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacGroup, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacGroup, Kind: "User", Name: user}}}
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
	testkit.Eventually(t, 30*time.Second, "RBAC lets the user read HelloWorlds", func(ctx context.Context) (bool, error) {
		return c.List(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "HelloWorldList"}}) == nil, nil
	})
	return c
}

// TestRoleChildNeedsEscalate: a hook that returns a Role granting what
// the operator does not hold (reading Secrets) is created with the RBAC
// `opzero manifests` derives (escalate on roles), and refused as
// ApplyForbidden without escalate.
func TestRoleChildNeedsEscalate(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	h := &hooks{children: func(req map[string]any) []any {
		parent, _ := req["parent"].(map[string]any)
		meta, _ := parent["metadata"].(map[string]any)
		return []any{map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
			"metadata": map[string]any{"name": meta["name"].(string) + "-secrets"},
			"rules":    []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get"}}}}}
	}}
	url := h.serve(t)
	c := &Controller{Kind: "CompositeController", Name: "roles", Object: map[string]any{"kind": "CompositeController"},
		Parents:  []Decorated{{Resource: mustResolve(t, env, "example.com/v1", "helloworlds")}},
		Children: []Child{{Resource: mustResolve(t, env, "rbac.authorization.k8s.io/v1", "roles"), Method: v1alpha1.ChildUpdateInPlace}},
		Sync:     webhook(url + "/sync")}
	cfg := &Config{Controllers: []*Controller{c}}
	d := &description.Controller{}
	completeDescription(d, cfg)
	var noEscalate []description.Rule
	for _, rule := range d.Rules {
		if len(rule.Verbs) != 1 || rule.Verbs[0] != "escalate" {
			noEscalate = append(noEscalate, rule)
		}
	}
	for _, tc := range []struct {
		name  string
		rules []description.Rule
		ok    bool
	}{{"derived", d.Rules, true}, {"without-escalate", noEscalate, false}} {
		t.Run(tc.name, func(t *testing.T) {
			helloWorld(t, env, ns, tc.name)
			rec := record.NewFakeRecorder(10)
			r := &Reconciler{Client: clientWith(t, env, ns+"-"+tc.name, tc.rules), Config: cfg, Hooks: &HookClient{}, Recorder: rec}
			_, err := r.Reconcile(ctx, CompositeKey("roles", ns, tc.name))
			if (err == nil) != tc.ok {
				t.Fatalf("sync error %v, want success %v", err, tc.ok)
			}
			if evs := drain(rec); !tc.ok && (len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SyncError Sync error: ApplyForbidden: ")) {
				t.Fatalf("events %q, want one Warning SyncError naming ApplyForbidden", evs)
			}
		})
	}
}
