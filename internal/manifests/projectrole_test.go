package manifests_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/manifests"
)

// TestRBACMarkersOutsideTheController: the +kubebuilder:rbac markers of
// every package of the module the binary is built from make the
// generated ClusterRole, not the reconciler's alone (widgets keeps one in
// its API package).
func TestRBACMarkersOutsideTheController(t *testing.T) {
	objs := generateFor(t, widgets(t), manifests.Options{})
	var found bool
	for _, o := range objs {
		if l, _ := o.Obj["metadata"].(map[string]any)["labels"].(map[string]any); o.Kind() != "ClusterRole" || l["app.kubernetes.io/component"] != "operator" {
			continue
		}
		b, _ := yaml.Marshal(o.Obj)
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal(b, &cr); err != nil {
			t.Fatal(err)
		}
		for _, r := range cr.Rules {
			if strings.Join(r.APIGroups, ",") == "apps" && strings.Join(r.Resources, ",") == "deployments" && strings.Contains(strings.Join(r.Verbs, ","), "patch") {
				found = true
			}
		}
		if !found {
			t.Errorf("ClusterRole %s lacks patch on deployments.apps, the API package's marker:\n%s", o.Name(), b)
		}
	}
	if !found {
		t.Error("no widgets ClusterRole generated")
	}
}

// TestProjectRoleGaps: each rule of the project's own
// config/rbac/role.yaml the generated role lacks is a warning naming the
// file, the verbs and the resource; a role the generated one covers says
// nothing; a file that cannot be read is a warning, not a failure.
func TestProjectRoleGaps(t *testing.T) {
	generated := []rbacv1.PolicyRule{
		{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"settings"}, Verbs: []string{"get"}},
	}
	for _, tc := range []struct {
		name, role string
		want       []string // in the warnings; none: no warning
	}{
		{name: "covered", role: `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: manager-role}
rules:
- apiGroups: [example.com]
  resources: [widgets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [settings]
  verbs: [get]
`},
		{name: "wider", role: `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: manager-role}
rules:
- apiGroups: [apps]
  resources: [deployments, statefulsets]
  verbs: [get, patch]
- apiGroups: [example.com]
  resources: [widgets]
  verbs: [delete, get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
`, want: []string{"config/rbac/role.yaml grants get,patch deployments.apps", "grants get,patch statefulsets.apps", "grants delete widgets.example.com", "grants get configmaps,"}},
		{name: "unreadable", role: "kind: [\n", want: []string{"config/rbac/role.yaml could not be read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "config", "rbac"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "config", "rbac", "role.yaml"), []byte(tc.role), 0o644); err != nil {
				t.Fatal(err)
			}
			var w bytes.Buffer
			manifests.WarnRoleGaps(&w, "op", manifests.ReadProjectRole(root, root), generated)
			got := w.String()
			if len(tc.want) == 0 && got != "" {
				t.Errorf("warnings for a role the generated one covers:\n%s", got)
			}
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("warnings lack %q:\n%s", want, got)
				}
			}
		})
	}
	var w bytes.Buffer
	manifests.WarnRoleGaps(&w, "op", manifests.ReadProjectRole(t.TempDir(), "."), generated)
	if w.Len() != 0 {
		t.Errorf("a project without config/rbac/role.yaml: %s", w.String())
	}
}
