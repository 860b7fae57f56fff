package manifests_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestGeneratedCRDsMatchTheRepo: the CRDs generated from Go types are the
// ones the repository ships (made by `go generate` with controller-gen), byte
// for byte, so the checked-in files are derived, never hand-edited.
func TestGeneratedCRDsMatchTheRepo(t *testing.T) {
	for pkg, file := range map[string]string{
		"./examples/configwatcher/api/v1": "examples/configwatcher/config/crd/k8spatterns.io_configwatchers.yaml",
		"./api/v1alpha1":                  "config/crd/opzero.dev_wakeups.yaml",
	} {
		crds, err := manifests.GenerateCRDs(repoRoot(t), pkg)
		if err != nil {
			t.Fatal(err)
		}
		if len(crds) != 1 || crds[0].File != filepath.Base(file) {
			t.Fatalf("%s: generated %d CRDs, want one named %s", pkg, len(crds), filepath.Base(file))
		}
		want, err := os.ReadFile(filepath.Join(repoRoot(t), file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(crds[0].YAML, want) {
			t.Errorf("%s differs from the CRD generated from %s: run `go generate %s`\ngot:\n%s", file, pkg, pkg, crds[0].YAML)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../..") // internal/manifests
	if err != nil {
		t.Fatal(err)
	}
	return d
}
