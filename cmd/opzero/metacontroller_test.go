package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/kustomize"
)

// TestMetacontrollerFromOwnFolder: the CLI, built as a user installs it,
// runs `opzero manifests` for opzero-metacontroller in a folder of the
// user's own that is no Go module (Metacontroller's examples are YAML and
// a hook script): the operator is built from the opzero source the CLI
// came from, the output folder is a kustomization that also names the
// controllers' kustomization folder, and it renders with the operator's
// ko:// image and the CompositeController. Failure paths: a name in
// OPZERO_METACONTROLLER_FILES that does not exist (nothing written); a
// plain file outside the output folder (said, not listed).
func TestMetacontrollerFromOwnFolder(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and opzero-metacontroller")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	exe := filepath.Join(work, "bin", "opzero")
	build := exec.Command("go", "build", "-o", exe, "./cmd/opzero")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/opzero: %v\n%s", err, b)
	}
	own := filepath.Join(work, "hooks") // the user's folder: YAML, no go.mod
	ex := filepath.Join(own, "helloworld")
	if err := os.MkdirAll(ex, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"crd.yaml", "controller.yaml", "hook.yaml", "hook.py"} {
		b, err := os.ReadFile(filepath.Join(root, "examples/metacontroller/helloworld", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ex, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ex, "kustomization.yaml"), []byte("resources: [crd.yaml, controller.yaml, hook.yaml]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(own, "loose.yaml") // a plain file outside deploy/
	if err := os.WriteFile(loose, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: loose}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(files string, args ...string) (string, error) {
		cmd := exec.Command(exe, args...)
		cmd.Dir = own
		cmd.Env = append(os.Environ(), metacontrollerFilesEnv+"="+files, "GOFLAGS=")
		b, err := cmd.CombinedOutput()
		t.Logf("$ %s=%s opzero %s\n%s", metacontrollerFilesEnv, files, strings.Join(args, " "), b)
		return string(b), err
	}
	const pkg = "github.com/opzero/opzero/cmd/opzero-metacontroller"

	if _, err := run("helloworld,nope.yaml", "manifests", "--operator", pkg, "-o", "deploy"); err == nil {
		t.Fatal("a name that does not exist was accepted")
	}
	if _, err := os.Stat(filepath.Join(own, "deploy")); !os.IsNotExist(err) {
		t.Fatalf("something was written for a name that does not exist: %v", err)
	}

	out, err := run("helloworld/controller.yaml,helloworld/crd.yaml,loose.yaml", "manifests", "--operator", pkg, "--idle", "3s", "-o", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "go.mod file not found") || !strings.Contains(out, "loose.yaml: not added") {
		t.Fatalf("output %q: want no go.mod error and loose.yaml said", out)
	}
	k, err := os.ReadFile(filepath.Join(own, "deploy", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(k), "- rbac.yaml") || strings.Count(string(k), "- ../helloworld\n") != 1 || strings.Contains(string(k), "loose") {
		t.Fatalf("kustomization.yaml:\n%s\nwant opzero's files and ../helloworld once", k)
	}
	y, err := kustomize.Render(filepath.Join(own, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: ko://" + pkg, "kind: CompositeController", "kind: CustomResourceDefinition"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("the rendered kustomization lacks %q", want)
		}
	}
}
