package kustomize_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/kustomize"
)

const project = "testdata/project/config/default"

// TestReadManager: config/default of a kubebuilder-style project, rendered
// with its namespace, namePrefix, labels and a patch, gives the manager
// container's settings as kustomize builds them.
func TestReadManager(t *testing.T) {
	m, err := kustomize.ReadManager(project)
	if err != nil {
		t.Fatal(err)
	}
	if m.File != filepath.Join(project, "kustomization.yaml") || m.Deployment != "memcached-controller-manager" || m.Container != "manager" {
		t.Errorf("file %s, Deployment %s, container %s", m.File, m.Deployment, m.Container)
	}
	if m.Namespace != "memcached-system" || m.NamePrefix != "memcached-" || !reflect.DeepEqual(m.Labels, map[string]string{"team": "caches"}) {
		t.Errorf("namespace %q, namePrefix %q, labels %v", m.Namespace, m.NamePrefix, m.Labels)
	}
	var names []string
	for _, e := range m.Env {
		names = append(names, e["name"].(string))
	}
	// the patch's variable is merged in, as kustomize merges a list keyed by name
	if got := strings.Join(names, ","); got != "LOG_LEVEL,MEMCACHED_IMAGE,POD_NAMESPACE,POD_NAME" {
		t.Errorf("env %s", got)
	}
	if len(m.EnvFrom) != 1 || m.Resources == nil || m.SecurityContext["allowPrivilegeEscalation"] != false || m.PodSecurityContext["runAsNonRoot"] != true {
		t.Errorf("envFrom %v, resources %v, securityContext %v, pod %v", m.EnvFrom, m.Resources, m.SecurityContext, m.PodSecurityContext)
	}
	if m.NamespaceObject == nil {
		t.Error("no Namespace object for memcached-system")
	}
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
      - name: %s
        image: x
`

// TestReadManagerErrors: a kustomization that does not build, or builds
// no manager or two, is an error naming its file or folder.
func TestReadManagerErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  []string
	}{
		"missing resource": {map[string]string{"kustomization.yaml": "resources:\n- manager.yaml\n"},
			[]string{"kustomize build", "manager.yaml"}},
		"not YAML": {map[string]string{"kustomization.yaml": "resources: [\n"},
			[]string{"kustomize build"}},
		"bad patch": {map[string]string{"kustomization.yaml": "resources:\n- d.yaml\npatches:\n- path: nope.yaml\n",
			"d.yaml": strings.Replace(strings.Replace(deployment, "%s", "d", 1), "%s", "manager", 1)},
			[]string{"kustomize build", "nope.yaml"}},
		"no manager": {map[string]string{"kustomization.yaml": "resources:\n- d.yaml\n",
			"d.yaml": strings.Replace(strings.Replace(deployment, "%s", "web", 1), "%s", "nginx", 1)},
			[]string{"kustomization.yaml renders no manager", "Deployments: web"}},
		"two managers": {map[string]string{"kustomization.yaml": "resources:\n- a.yaml\n- b.yaml\n",
			"a.yaml": strings.Replace(strings.Replace(deployment, "%s", "a", 1), "%s", "manager", 1),
			"b.yaml": strings.Replace(strings.Replace(deployment, "%s", "b", 1), "%s", "manager", 1)},
			[]string{"renders 2 managers (a, b)"}},
		"no kustomization": {map[string]string{"d.yaml": "x: 1\n"}, []string{"has no kustomization.yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, tc.files)
			_, err := kustomize.ReadManager(dir)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append(tc.want, dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestWriteKustomization: the folder renders to its files' objects; a
// kustomization opzero did not write is refused and kept.
func TestWriteKustomization(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"a.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, namespace: ns}\n",
		"b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: ns}\n",
	})
	if kustomize.Ours(dir) {
		t.Fatal("Ours before writing")
	}
	if err := kustomize.WriteKustomization(dir, []string{"a.yaml", "b.yaml"}); err != nil {
		t.Fatal(err)
	}
	if !kustomize.Ours(dir) {
		t.Error("not Ours after writing")
	}
	b, err := kustomize.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.Contains(got, "kind: ServiceAccount") || !strings.Contains(got, "kind: ConfigMap") {
		t.Errorf("rendered:\n%s", got)
	}
	if err := kustomize.WriteKustomization(dir, []string{"a.yaml"}); err != nil {
		t.Errorf("rewriting its own: %v", err)
	}

	theirs := t.TempDir()
	own := "resources:\n- a.yaml\n"
	write(t, theirs, map[string]string{"kustomization.yaml": own})
	err = kustomize.WriteKustomization(theirs, []string{"a.yaml"})
	if err == nil || !strings.Contains(err.Error(), "was not written by opzero manifests") {
		t.Errorf("a user's kustomization.yaml: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(theirs, "kustomization.yaml")); string(b) != own {
		t.Errorf("the user's kustomization.yaml changed:\n%s", b)
	}
	yml := t.TempDir()
	write(t, yml, map[string]string{"kustomization.yml": own})
	if err := kustomize.CheckWritable(yml); err == nil || !strings.Contains(err.Error(), "two kustomization files") {
		t.Errorf("a kustomization.yml: %v", err)
	}
}
