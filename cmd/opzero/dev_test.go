package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevRefusesBadManifests: manifests that do not parse are reported
// before any control plane is looked for or started.
func TestDevRefusesBadManifests(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"dev"}, {"dev", "-f", bad}, {"dev", "-f", "-"}} {
		var out bytes.Buffer
		cmd := newRootCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetIn(strings.NewReader("just text\n"))
		cmd.SetArgs(args)
		err := cmd.Execute()
		if err == nil {
			t.Fatalf("opzero %v: no error", args)
		}
		t.Logf("opzero %s: %v", strings.Join(args, " "), err)
		if strings.Contains(out.String(), "control plane") {
			t.Errorf("opzero %v looked for a control plane:\n%s", args, out.String())
		}
	}
}
