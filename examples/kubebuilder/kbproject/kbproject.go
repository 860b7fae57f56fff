// Package kbproject generates the kubebuilder project of the kubebuilder
// example for tests: kubebuilder v4 built from the Go module proxy, `init`
// and `create api`, the user's reconciler (../testdata), and the migration
// of cmd/main.go (../testdata/main.go.diff). The example's own tests (opzero
// dev) and the real-Knative suite (internal/devenv/cluster) run the same
// project.
package kbproject

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// Version is the kubebuilder release the project is generated with (the
// module proxy's; `go list -m -versions` lists them).
const Version = "v4.10.1"

// CheckoutRoot returns the root of the opzero checkout.
func CheckoutRoot(t testing.TB) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func testdata(t testing.TB) string {
	return filepath.Join(CheckoutRoot(t), "examples", "kubebuilder", "testdata")
}

// Run runs a command in dir and fails the test with its output.
func Run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// Tools builds kubebuilder (from the module proxy) and controller-gen
// (from the checkout's module); the Go build cache makes later runs quick.
func Tools(t testing.TB) (kubebuilder, controllerGen string) {
	t.Helper()
	bin := t.TempDir()
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal([]byte(Run(t, bin, "go", "mod", "download", "-json", "sigs.k8s.io/kubebuilder/v4@"+Version)), &dl); err != nil || dl.Dir == "" {
		t.Fatalf("downloading kubebuilder %s: %v %s", Version, err, dl.Error)
	}
	kubebuilder, controllerGen = filepath.Join(bin, "kubebuilder"), filepath.Join(bin, "controller-gen")
	Run(t, dl.Dir, "go", "build", "-o", kubebuilder, ".")
	Run(t, CheckoutRoot(t), "go", "build", "-o", controllerGen, "sigs.k8s.io/controller-tools/cmd/controller-gen")
	return kubebuilder, controllerGen
}

// Adopted generates the kubebuilder project, writes the user's API field
// and reconciler, and applies the migration to cmd/main.go and go.mod
// (requiring this checkout's opzero). It returns the project's folder and
// the migration's diff of cmd/main.go (git diff --numstat).
func Adopted(t testing.TB) (dir, diff string) {
	t.Helper()
	dir, before := Generated(t)
	mainGo := filepath.Join(dir, "cmd/main.go")
	Run(t, dir, "go", "mod", "edit", "-replace", "github.com/opzero/opzero="+CheckoutRoot(t),
		"-require", "github.com/opzero/opzero@v0.0.0-00010101000000-000000000000", "-require", "sigs.k8s.io/controller-runtime@v0.25.2")
	Run(t, dir, "go", "mod", "tidy")
	Run(t, dir, "go", "build", "./...")
	orig := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(orig, before, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "diff", "--no-index", "--numstat", orig, mainGo)
	out, _ := cmd.Output() // exit 1: the files differ
	return dir, strings.TrimSpace(string(out))
}

// Generated generates the kubebuilder project with the user's API field
// and reconciler, and changes cmd/main.go as docs/migrating.md shows
// (testdata/main.go.diff). It returns the project's folder and cmd/main.go
// as kubebuilder wrote it.
func Generated(t testing.TB) (dir string, mainBefore []byte) {
	t.Helper()
	kb, cg := Tools(t)
	dir = filepath.Join(t.TempDir(), "memcached")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, dir, kb, "init", "--domain", "example.com", "--repo", "example.com/memcached", "--skip-go-version-check")
	Run(t, dir, kb, "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", "Memcached", "--resource", "--controller", "--make=false")

	// The user's operator, as it is before opzero: a size in the spec, the
	// tutorial's reconciler, the generated deep copies.
	types := filepath.Join(dir, "api/v1alpha1/memcached_types.go")
	ReplaceIn(t, types, "Foo *string `json:\"foo,omitempty\"`", "Size int32 `json:\"size,omitempty\"`")
	src, err := os.ReadFile(filepath.Join(testdata(t), "memcached_controller.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "internal/controller/memcached_controller.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	Run(t, dir, cg, "object:headerFile=hack/boilerplate.go.txt", "paths=./api/...")
	// and the CRDs and RBAC that its make manifests writes (its envtest suite installs the CRDs)
	Run(t, dir, cg, "rbac:roleName=manager-role", "crd", "webhook", "paths=./...", "output:crd:artifacts:config=config/crd/bases")
	// Its test gives the reconciler the event recorder it now has.
	ctest := filepath.Join(dir, "internal/controller/memcached_controller_test.go")
	ReplaceIn(t, ctest, "\t\"k8s.io/apimachinery/pkg/types\"\n", "\t\"k8s.io/apimachinery/pkg/types\"\n\t\"k8s.io/client-go/tools/record\"\n")
	ReplaceIn(t, ctest, "Scheme: k8sClient.Scheme(),", "Scheme: k8sClient.Scheme(), Recorder: record.NewFakeRecorder(10),")

	// The migration of cmd/main.go (testdata/main.go.diff).
	mainGo := filepath.Join(dir, "cmd/main.go")
	before, err := os.ReadFile(mainGo)
	if err != nil {
		t.Fatal(err)
	}
	Run(t, dir, "git", "apply", "--unidiff-zero", filepath.Join(testdata(t), "main.go.diff"))
	return dir, before
}

// ReplaceIn replaces old, which must be in path once, with new.
func ReplaceIn(t testing.TB, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b, []byte(old)) != 1 {
		t.Fatalf("%s: %q is not there once (kubebuilder %s scaffolds differently?)", path, old, Version)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
