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
	for pkg, files := range map[string][]string{
		"./examples/configwatcher/api/v1": {"examples/configwatcher/config/crd/k8spatterns.io_configwatchers.yaml"},
		"./api/v1alpha1":                  {"config/crd/opzero.dev_subscriptions.yaml", "config/crd/opzero.dev_wakeups.yaml"},
	} {
		crds, err := manifests.GenerateCRDs(repoRoot(t), pkg)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range crds {
			got = append(got, c.File)
		}
		if len(crds) != len(files) {
			t.Fatalf("%s: generated %v, want %d CRDs: %v", pkg, got, len(files), files)
		}
		for i, file := range files { // GenerateCRDs orders them by file name
			if crds[i].File != filepath.Base(file) {
				t.Fatalf("%s: generated %v, want %v", pkg, got, files)
			}
			want, err := os.ReadFile(filepath.Join(repoRoot(t), file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(crds[i].YAML, want) {
				t.Errorf("%s differs from the CRD generated from %s: run `go generate %s`\ngot:\n%s", file, pkg, pkg, crds[i].YAML)
			}
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
