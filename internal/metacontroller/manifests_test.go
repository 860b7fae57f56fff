package metacontroller_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/metacontroller"
)

// TestManifestsFilterParentsBySelector: `opzero manifests` of
// opzero-metacontroller, for a CompositeController with
// parentResource.labelSelector and a DecoratorController of
// CustomResourceDefinitions with resources[].labelSelector, writes those
// selectors into the parents' sources (ApiServerSource spec.resources[].selector;
// with --source=hub the Subscription's labelSelector) and none into the
// children's; the fields it does not implement are in the description's
// warnings.
func TestManifestsFilterParentsBySelector(t *testing.T) {
	if testing.Short() {
		t.Skip("builds opzero-metacontroller")
	}
	dir := t.TempDir()
	crd, err := os.ReadFile("../../examples/metacontroller/helloworld/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("crd.yaml", string(crd))
	write("controllers.yaml", `apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: hello}
spec:
  parentResource:
    apiVersion: example.com/v1
    resource: helloworlds
    labelSelector:
      matchLabels: {tier: a}
      matchExpressions: [{key: paused, operator: DoesNotExist}]
  childResources: [{apiVersion: v1, resource: configmaps}]
  hooks: {sync: {webhook: {url: "http://hook.default/sync"}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: crds}
spec:
  resources:
  - apiVersion: apiextensions.k8s.io/v1
    resource: customresourcedefinitions
    labelSelector: {matchLabels: {decorate: "yes"}}
    annotationSelector: {matchAnnotations: {team: x}}
    ignoreStatusChanges: true
  attachments: [{apiVersion: v1, resource: configmaps}]
  hooks: {sync: {webhook: {url: "http://hook.default/sync"}}}
`)
	t.Setenv(metacontroller.FilesEnv, dir)
	ctx := context.Background()
	target, err := manifests.Describe(ctx, "../..", "./cmd/opzero-metacontroller")
	if err != nil {
		t.Fatal(err)
	}
	if w := target.Desc.Operators[0].Warnings; len(w) != 1 || !strings.Contains(w[0], "DecoratorController crds: spec.resources[0].ignoreStatusChanges: not implemented") {
		t.Errorf("the description's warnings (opzero manifests prints them): %q, want the one unsupported field", w)
	}
	want := map[string]string{"HelloWorld": "!paused,tier=a", "CustomResourceDefinition": "decorate=yes", "ConfigMap": ""}
	for _, source := range []string{manifests.SourceKnative, manifests.SourceHub} {
		o := manifests.Options{Mode: manifests.Serverless, Namespace: "default", Source: source}
		in, err := manifests.Prepare(ctx, target, o)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifests.Generate(in, o)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, obj := range objs {
			spec, _ := obj.Obj["spec"].(map[string]any)
			switch obj.Obj["kind"] {
			case "ApiServerSource":
				for _, r := range spec["resources"].([]any) {
					r := r.(map[string]any)
					got[r["kind"].(string)] = selectorString(t, r["selector"])
				}
			case "Subscription":
				for _, r := range spec["resources"].([]any) {
					r := r.(map[string]any)
					s, _ := r["labelSelector"].(string)
					got[r["kind"].(string)] = s
				}
			}
		}
		for kind, sel := range want {
			if g, ok := got[kind]; !ok || g != sel {
				t.Errorf("--source=%s: the %s source's selector is %q (present %v), want %q", source, kind, g, ok, sel)
			}
		}
	}
}

// selectorString is an ApiServerSource's LabelSelector in kubectl's form.
func selectorString(t *testing.T, sel any) string {
	t.Helper()
	if sel == nil {
		return ""
	}
	m := sel.(map[string]any)
	var parts []string
	if exprs, ok := m["matchExpressions"].([]any); ok {
		for _, e := range exprs {
			e := e.(map[string]any)
			if e["operator"] != "DoesNotExist" {
				t.Fatalf("unexpected expression %v", e)
			}
			parts = append(parts, "!"+e["key"].(string))
		}
	}
	if ml, ok := m["matchLabels"].(map[string]any); ok {
		for k, v := range ml {
			parts = append(parts, k+"="+v.(string))
		}
	}
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ","
		}
		out += p
	}
	return out
}

// TestManifestsHookNamespacesAndBind: `opzero manifests` for controllers
// whose hooks live in namespace metacontroller (a url) and hooks (a
// service reference), one of which returns RoleBindings, writes a
// Namespace for each (not for the operator's own, nor default), grants the
// operator bind on roles and cluster roles, and says why for both.
func TestManifestsHookNamespacesAndBind(t *testing.T) {
	if testing.Short() {
		t.Skip("builds opzero-metacontroller")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(`apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: binder}
spec:
  resources: [{apiVersion: rbac.authorization.k8s.io/v1, resource: clusterroles}]
  attachments: [{apiVersion: rbac.authorization.k8s.io/v1, resource: rolebindings}]
  hooks: {sync: {webhook: {url: "http://binder.metacontroller/sync"}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: other}
spec:
  resources: [{apiVersion: v1, resource: namespaces}]
  attachments: [{apiVersion: v1, resource: configmaps}]
  hooks:
    sync: {webhook: {service: {name: other, namespace: hooks}}}
    finalize: {webhook: {url: "http://other.ops.svc.cluster.local/finalize"}}
    customize: {webhook: {url: "http://hook.default/customize"}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(metacontroller.FilesEnv, dir)
	ctx := context.Background()
	target, err := manifests.Describe(ctx, "../..", "./cmd/opzero-metacontroller")
	if err != nil {
		t.Fatal(err)
	}
	warnings := strings.Join(target.Desc.Operators[0].Warnings, "\n")
	for _, want := range []string{"DecoratorController binder returns rolebindings: the operator may bind", "in namespace metacontroller", "in namespace hooks"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings %q lack %q", warnings, want)
		}
	}
	o := manifests.Options{Mode: manifests.Serverless, Namespace: "ops", Source: manifests.SourceKnative}
	in, err := manifests.Prepare(ctx, target, o)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, o)
	if err != nil {
		t.Fatal(err)
	}
	var namespaces []string
	bind := false
	for _, obj := range objs {
		switch obj.Kind() {
		case "Namespace":
			namespaces = append(namespaces, obj.Name())
		case "ClusterRole":
			rules, _ := obj.Obj["rules"].([]any)
			for _, r := range rules {
				m, _ := r.(map[string]any)
				if vs, _ := m["verbs"].([]any); len(vs) == 1 && vs[0] == "bind" {
					bind = true
				}
			}
		}
	}
	if strings.Join(namespaces, ",") != "hooks,metacontroller" {
		t.Errorf("Namespaces %v, want hooks and metacontroller (ops is the operator's, default exists)", namespaces)
	}
	if !bind {
		t.Error("the operator's ClusterRole has no bind rule")
	}
}

// TestManifestsEndpointConfigs: `opzero manifests` of webhook-auth's
// controller (spec.endpointConfigs: a CA ConfigMap, a client certificate
// and a token Secret; its children here are ServiceAccounts) warns of no
// unsupported field, says what it grants, and the operator's ClusterRole
// may get exactly those Secrets and that ConfigMap by name, nothing more
// of either.
func TestManifestsEndpointConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds opzero-metacontroller")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(`apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: webhook-auth-controller}
spec:
  generateSelector: true
  parentResource: {apiVersion: v1, resource: namespaces}
  childResources: [{apiVersion: v1, resource: serviceaccounts}]
  endpointConfigs:
  - host: webhook-auth-controller.metacontroller
    caBundle: {configMapRef: {name: webhook-auth-ca, namespace: metacontroller, key: ca.crt}}
    authorization: {type: Bearer, secretRef: {name: webhook-auth-token, namespace: metacontroller, key: token}}
    clientTLS: {secretRef: {name: webhook-auth-client, namespace: metacontroller}, certKey: tls.crt, privateKeyKey: tls.key}
  hooks:
    sync: {webhook: {url: "https://webhook-auth-controller.metacontroller/sync"}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(metacontroller.FilesEnv, dir)
	ctx := context.Background()
	target, err := manifests.Describe(ctx, "../..", "./cmd/opzero-metacontroller")
	if err != nil {
		t.Fatal(err)
	}
	warnings := strings.Join(target.Desc.Operators[0].Warnings, "\n")
	if strings.Contains(warnings, "endpointConfigs: not implemented") || strings.Contains(warnings, "unsupported") {
		t.Errorf("warnings %q report endpointConfigs", warnings)
	}
	for _, want := range []string{"name secrets metacontroller/webhook-auth-client, metacontroller/webhook-auth-token", "name configmaps metacontroller/webhook-auth-ca"} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings %q lack %q", warnings, want)
		}
	}
	o := manifests.Options{Mode: manifests.Serverless, Namespace: "ops", Source: manifests.SourceKnative}
	in, err := manifests.Prepare(ctx, target, o)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, o)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{} // resource -> names of the get rules on it
	for _, obj := range objs {
		if obj.Kind() != "ClusterRole" || obj.Name() != "opzero:ops:metacontroller" {
			continue
		}
		rules, _ := obj.Obj["rules"].([]any)
		for _, r := range rules {
			m, _ := r.(map[string]any)
			res, _ := m["resources"].([]any)
			names, _ := m["resourceNames"].([]any)
			for _, x := range res {
				if x == "secrets" || x == "configmaps" {
					for _, n := range names {
						got[x.(string)] = append(got[x.(string)], n.(string))
					}
					if len(names) == 0 {
						got[x.(string)] = append(got[x.(string)], "*")
					}
				}
			}
		}
	}
	if strings.Join(got["configmaps"], ",") != "webhook-auth-ca" || strings.Join(got["secrets"], ",") != "webhook-auth-client,webhook-auth-token" {
		t.Errorf("granted configmaps %v, secrets %v; want webhook-auth-ca, and webhook-auth-client and webhook-auth-token, by name only", got["configmaps"], got["secrets"])
	}
}
