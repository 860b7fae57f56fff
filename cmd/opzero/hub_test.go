package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHubManifests: `opzero hub manifests` writes the hub exactly as every
// operator's hub.yaml has it (the golden serverless case), and the
// Subscription and Wakeup CRDs as config/crd has them; it refuses to write
// into an operator's folder, whose files it would remove.
func TestHubManifests(t *testing.T) {
	t.Chdir("../..")
	dir := filepath.Join(t.TempDir(), "hub")
	if out, err := runOpzero(t, "hub", "manifests", "-o", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "hub.yaml"))
	want, _ := os.ReadFile(filepath.Join("internal", "manifests", "testdata", "golden", "serverless", "hub.yaml"))
	if len(got) == 0 || !bytes.Equal(got, want) {
		t.Errorf("hub.yaml differs from the golden operator's hub.yaml")
	}
	crds, _ := os.ReadFile(filepath.Join(dir, "crds.yaml"))
	for _, f := range []string{"opzero.dev_subscriptions.yaml", "opzero.dev_wakeups.yaml"} {
		b, _ := os.ReadFile(filepath.Join("config", "crd", f))
		if len(b) == 0 || !bytes.Contains(crds, b) {
			t.Errorf("crds.yaml lacks config/crd/%s as it is", f)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("wrote %d files, want crds.yaml and hub.yaml", len(entries))
	}

	op := filepath.Join(t.TempDir(), "deploy")
	if err := os.MkdirAll(op, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(op, "operator.yaml"), []byte("---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runOpzero(t, "hub", "manifests", "-o", op)
	if err == nil || !strings.Contains(out+err.Error(), "holds an operator's manifests") {
		t.Errorf("writing into an operator's folder: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(op, "operator.yaml")); err != nil {
		t.Errorf("the operator's file is gone: %v", err)
	}
}
