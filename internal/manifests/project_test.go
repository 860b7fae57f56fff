package manifests_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/kustomize"
	"github.com/opzero/opzero/internal/manifests"
)

// kbConfig is a kubebuilder-style config/default (namespace
// memcached-system, namePrefix memcached-, label team=caches, a patch),
// read as opzero manifests reads a project's.
func kbConfig(t *testing.T) *kustomize.Manager {
	t.Helper()
	m, err := manifests.ReadProject(filepath.Join(repoRoot(t), "internal/kustomize/testdata/project/config/default"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func envByName(c map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, e := range c["env"].([]any) {
		m := e.(map[string]any)
		out[m["name"].(string)] = m
	}
	return out
}

// TestProjectConfig: what config/ declares for the manager reaches the
// Knative Service's and the classic Deployment's container (env after the
// operator's and the command line's, which win; envFrom; resources;
// securityContext), every object takes config/'s namespace, namePrefix and
// labels (not the hub's, not selectors), and the Namespace object comes
// along; what Knative refuses or opzero sets is left out with a warning.
func TestProjectConfig(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{manifests.Serverless, manifests.Classic} {
		t.Run(mode, func(t *testing.T) {
			var warnings bytes.Buffer
			o := manifests.Options{Mode: mode, Project: kbConfig(t), Warnings: &warnings,
				Env: []description.EnvVar{{Name: "LOG_LEVEL", Value: "info"}}}
			objs, err := manifests.Generate(in, o)
			if err != nil {
				t.Fatal(err)
			}
			c := operatorContainer(t, objs)
			env := envByName(c)
			if v := env["MEMCACHED_IMAGE"]["value"]; v != "memcached:1.6.26-alpine3.19" {
				t.Errorf("MEMCACHED_IMAGE = %v, want config/'s", v)
			}
			if v := env["LOG_LEVEL"]["value"]; v != "info" {
				t.Errorf("LOG_LEVEL = %v, want --env's info (config/'s patch says debug)", v)
			}
			if pn := env["POD_NAMESPACE"]; pn["value"] == nil && mode == manifests.Serverless || pn["valueFrom"] == nil && mode == manifests.Classic {
				t.Errorf("POD_NAMESPACE = %v: opzero's own, not config/'s", pn)
			}
			_, podName := env["POD_NAME"]
			if podName != (mode == manifests.Classic) {
				t.Errorf("POD_NAME (a fieldRef) in the container: %v; want it in classic only (Knative refuses fieldRef)", podName)
			}
			w := warnings.String()
			for _, want := range []string{"env POD_NAMESPACE is reserved", "env LOG_LEVEL: the value the operator (builder.WithEnv) or --env/--env-secret gives wins"} {
				if !strings.Contains(w, want) {
					t.Errorf("warnings do not say %q:\n%s", want, w)
				}
			}
			if mode == manifests.Serverless && !strings.Contains(w, "POD_NAME (valueFrom fieldRef) is left out of the Knative Service") {
				t.Errorf("warnings do not say POD_NAME is left out:\n%s", w)
			}
			if from, _ := c["envFrom"].([]any); len(from) != 1 {
				t.Errorf("envFrom %v, want config/'s ConfigMap", c["envFrom"])
			}
			if c["resources"] == nil || c["securityContext"] == nil {
				t.Errorf("resources %v, securityContext %v", c["resources"], c["securityContext"])
			}
			for _, ob := range objs {
				u := unstructured.Unstructured{Object: ob.Obj}
				if ob.Raw != nil {
					continue
				}
				if ns := u.GetNamespace(); ns != "" && ns != "memcached-system" && ob.File != manifests.FileHub {
					t.Errorf("%s %s in namespace %s, want config/'s memcached-system", ob.Kind(), ob.Name(), ns)
				}
				team := u.GetLabels()["team"]
				if (team == "caches") == (ob.File == manifests.FileHub) {
					t.Errorf("%s %s (%s): label team=%q", ob.Kind(), ob.Name(), ob.File, team)
				}
				if ob.File == manifests.FileOperator {
					if u.GetName() != "memcached-configwatcher" {
						t.Errorf("%s named %s, want config/'s namePrefix", ob.Kind(), u.GetName())
					}
					tl, _, _ := unstructured.NestedStringMap(ob.Obj, "spec", "template", "metadata", "labels")
					sel, _, _ := unstructured.NestedStringMap(ob.Obj, "spec", "selector", "matchLabels")
					if tl["team"] != "caches" || sel["team"] != "" {
						t.Errorf("template labels %v, selector %v: want the label on the template only", tl, sel)
					}
					sa, _, _ := unstructured.NestedString(ob.Obj, "spec", "template", "spec", "serviceAccountName")
					if sa != "memcached-configwatcher" {
						t.Errorf("serviceAccountName %s", sa)
					}
					_, podSC, _ := unstructured.NestedMap(ob.Obj, "spec", "template", "spec", "securityContext")
					if podSC != (mode == manifests.Classic) {
						t.Errorf("pod securityContext set: %v; want it in classic only (Knative refuses it by default)", podSC)
					}
				}
				if ob.Kind() == "ServiceAccount" && ob.File == manifests.FileRBAC && !strings.HasPrefix(ob.Name(), "memcached-") {
					t.Errorf("ServiceAccount %s without the namePrefix", ob.Name())
				}
				if ob.Kind() == "Subscription" {
					op, _, _ := unstructured.NestedString(ob.Obj, "spec", "operator")
					if ob.Name() != "memcached-configwatcher" || op != "configwatcher" {
						t.Errorf("Subscription %s for operator %s: want it named with the prefix, for the controller's own name", ob.Name(), op)
					}
				}
			}
			if !slices.ContainsFunc(objs, func(ob manifests.Object) bool {
				return ob.File == manifests.FileNamespace && ob.Kind() == "Namespace" && ob.Name() == "memcached-system"
			}) {
				t.Error("no Namespace memcached-system in namespace.yaml")
			}

			// --namespace wins over config/'s, and config/'s Namespace object is left out.
			o.Namespace = "ops"
			objs, err = manifests.Generate(in, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, ob := range objs {
				if ob.File == manifests.FileNamespace {
					t.Errorf("%s %s with --namespace=ops", ob.Kind(), ob.Name())
				}
				if ns := ob.Namespace(); ns != "" && ns != "ops" && ob.File != manifests.FileHub {
					t.Errorf("%s %s in %s with --namespace=ops", ob.Kind(), ob.Name(), ns)
				}
			}
		})
	}
}

// TestProjectConfigRefused: an env name in config/ that is not a name, or
// a namePrefix that makes the operator's name invalid, is refused naming
// the kustomization.
func TestProjectConfigRefused(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*kustomize.Manager{
		"env name":   {File: "config/default/kustomization.yaml", Env: []map[string]any{{"name": "1BAD", "value": "x"}}},
		"namePrefix": {File: "config/default/kustomization.yaml", NamePrefix: "Caps_"},
		"envFrom":    {File: "config/default/kustomization.yaml", EnvFrom: []map[string]any{{"prefix": "X_"}}},
	} {
		_, err := manifests.Generate(in, manifests.Options{Project: m})
		if err == nil || !strings.Contains(err.Error(), "config/default/kustomization.yaml") {
			t.Errorf("%s: %v, want an error naming the kustomization", name, err)
		}
	}
}

// TestWriteOverlay: a folder written as an overlay renders with kustomize
// to the same objects; a kustomization.yaml opzero did not write is
// refused and nothing is written.
func TestWriteOverlay(t *testing.T) {
	objs := generate(t, manifests.Options{})
	dir := filepath.Join(t.TempDir(), "config", "serverless")
	if err := manifests.WriteOverlay(dir, objs); err != nil {
		t.Fatal(err)
	}
	b, err := kustomize.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bytes.Count(b, []byte("\nkind: ")), len(objs); got != want {
		t.Errorf("kustomize build renders %d objects, want %d", got, want)
	}
	k, _ := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if !strings.Contains(string(k), "- crds.yaml\n- hub.yaml\n- rbac.yaml\n- operator.yaml\n- sources.yaml\n") {
		t.Errorf("kustomization.yaml:\n%s", k)
	}

	theirs := t.TempDir()
	if err := os.WriteFile(filepath.Join(theirs, "kustomization.yaml"), []byte("resources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := manifests.WriteOverlay(theirs, objs); err == nil {
		t.Fatal("wrote over a user's kustomization.yaml")
	}
	if entries, _ := os.ReadDir(theirs); len(entries) != 1 {
		t.Errorf("files written next to the user's kustomization.yaml: %v", entries)
	}
}

// TestNamePrefixOfTheProjectItself: kubebuilder's default namePrefix is
// "<project>-", and opzero names the operator after the project: the
// prefix is not repeated (configwatcher, not configwatcher-configwatcher);
// another prefix goes before the name.
func TestNamePrefixOfTheProjectItself(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string]string{"configwatcher-": "configwatcher", "prod-": "prod-configwatcher", "": "configwatcher"} {
		m := kbConfig(t)
		m.NamePrefix = prefix
		objs, err := manifests.Generate(in, manifests.Options{Project: m})
		if err != nil {
			t.Fatal(err)
		}
		for _, ob := range objs {
			if ob.File == manifests.FileOperator && ob.Name() != want {
				t.Errorf("namePrefix %q: %s named %s, want %s", prefix, ob.Kind(), ob.Name(), want)
			}
		}
	}
}
