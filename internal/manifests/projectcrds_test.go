package manifests_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestProjectCRDs: the CRDs a project ships under config/crd are read (its
// kustomization left out, subfolders included); no folder is none; a CRD
// that names no group is an error naming its file.
func TestProjectCRDs(t *testing.T) {
	root := t.TempDir()
	if got, err := manifests.ProjectCRDs(root, root); err != nil || len(got) != 0 {
		t.Fatalf("no config/crd: %v, %v; want none", got, err)
	}
	write := func(name, s string) {
		p := filepath.Join(root, "config/crd", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kustomization.yaml", "resources:\n- bases/b.example_gadgets.yaml\n")
	write("bases/b.example_gadgets.yaml", `# the project's own
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.b.example
spec:
  group: b.example
  names: {kind: Gadget, plural: gadgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`)
	got, err := manifests.ProjectCRDs(root, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].CRD.Spec.Names.Kind != "Gadget" || got[0].From != "config/crd/bases/b.example_gadgets.yaml" || got[0].File != "b.example_gadgets.yaml" {
		t.Fatalf("ProjectCRDs = %+v, want the Gadget CRD from config/crd/bases", got)
	}
	write("broken.yaml", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {names: {kind: X}}\n")
	if _, err := manifests.ProjectCRDs(root, root); err == nil || !strings.Contains(err.Error(), "config/crd/broken.yaml") {
		t.Errorf("a CRD without a group: %v, want an error naming config/crd/broken.yaml", err)
	}
}
