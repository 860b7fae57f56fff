package manifests_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestProjectCRDOptions: the crd generator's options of the project's
// Makefile, as kubebuilder writes its manifests target and as projects
// change it; none when it gives none or there is no Makefile.
func TestProjectCRDOptions(t *testing.T) {
	for _, tc := range []struct{ makefile, want string }{
		{"manifests: controller-gen\n\t$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths=\"./...\" output:crd:artifacts:config=config/crd/bases\n", ""},
		{"manifests: controller-gen\n\t$(CONTROLLER_GEN) rbac:roleName=manager-role crd:maxDescLen=0 webhook paths=\"./...\" output:crd:artifacts:config=config/crd/bases\n", "maxDescLen=0"},
		{"manifests:\n\t\"$(CONTROLLER_GEN)\" \"crd:maxDescLen=0,generateEmbeddedObjectMeta=true\" paths=./api/...\n", "maxDescLen=0,generateEmbeddedObjectMeta=true"},
		{"build:\n\tgo build ./...\n# crd:maxDescLen=0 in a comment of another line\n", ""},
	} {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "Makefile"), []byte(tc.makefile), 0o644); err != nil {
			t.Fatal(err)
		}
		got, file, err := manifests.ProjectCRDOptions(root)
		if err != nil || got != tc.want || file != filepath.Join(root, "Makefile") {
			t.Errorf("Makefile %q: options %q from %q (%v), want %q", tc.makefile, got, file, err, tc.want)
		}
	}
	if got, file, err := manifests.ProjectCRDOptions(t.TempDir()); got != "" || file != "" || err != nil {
		t.Errorf("no Makefile: %q %q %v", got, file, err)
	}
}
