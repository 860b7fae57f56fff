// Package kbproject generates the kubebuilder project of the kubebuilder
// example for tests: kubebuilder v4 built from the Go module proxy, `init`
// and `create api`, the user's reconciler (../testdata), and the migration
// of cmd/main.go (../testdata/main.go.diff); and the multigroup fleet
// project of issue 28 (fleet.go: three APIs in two groups, a webhook on
// Frigate). The example's own tests (opzero dev) and the real-Knative
// suite (internal/devenv/cluster) run the same projects.
package kbproject

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/opzero/opzero/internal/controllergen"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/kustomize"
)

// Version is the kubebuilder release the projects are generated with (the
// module proxy's; `go list -m -versions` lists them): by default v4.7.1,
// which scaffolds controller-runtime v0.21.0, k8s.io v0.33.0 and go 1.24.0,
// the oldest opzero supports. OPZERO_KUBEBUILDER picks another
// (hack/matrix.sh: v4.13.1 scaffolds v0.23.3, v4.16.0 v0.25.0).
var Version = func() string {
	if v := os.Getenv("OPZERO_KUBEBUILDER"); v != "" {
		return v
	}
	return "v4.7.1"
}()

// goModBefore is where the generated project's go.mod is kept before its
// adoption, beside the project's folder.
func goModBefore(dir string) string { return filepath.Join(filepath.Dir(dir), "go.mod.before") }

// KeepGoMod records the project's go.mod before the adoption.
func KeepGoMod(t testing.TB, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goModBefore(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// KeptVersions: adopting opzero (requiring it, go mod tidy) changed
// neither the project's go directive nor the version of any module it
// requires, directly or indirectly; it logs the comparison. (opzero's CLI
// runs controller-gen as a program, so the library's module requires no
// controller-tools and none of the newer modules it would bring.)
func KeptVersions(t testing.TB, dir string) {
	t.Helper()
	parse := func(path string) *modfile.File {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(path, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	before, after := parse(goModBefore(dir)), parse(filepath.Join(dir, "go.mod"))
	if before.Go.Version != after.Go.Version {
		t.Errorf("go.mod's go directive went from %s to %s", before.Go.Version, after.Go.Version)
	}
	now := map[string]string{}
	for _, r := range after.Require {
		now[r.Mod.Path] = r.Mod.Version
	}
	var moved []string
	for _, r := range before.Require {
		if v := now[r.Mod.Path]; v != r.Mod.Version {
			t.Errorf("go.mod's requirement %s %s became %q", r.Mod.Path, r.Mod.Version, v)
			moved = append(moved, r.Mod.Path+" "+r.Mod.Version+" -> "+v)
		}
	}
	list := ""
	if len(moved) > 0 {
		list = " (" + strings.Join(moved, ", ") + ")"
	}
	t.Logf("kubebuilder %s project's go.mod before and after the adoption: go %s kept; %d of %d requirements kept, %d moved%s, %d added (opzero and what only it needs)",
		Version, after.Go.Version, len(before.Require)-len(moved), len(before.Require), len(moved), list, len(after.Require)-len(before.Require))
}

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

// Tools builds kubebuilder (from the module proxy) and returns it with the
// controller-gen opzero runs (internal/controllergen: built once into the
// user cache); the Go build cache makes later runs quick.
func Tools(t testing.TB) (kubebuilder, controllerGen string) {
	t.Helper()
	bin := t.TempDir()
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal([]byte(Run(t, bin, "go", "mod", "download", "-json", "sigs.k8s.io/kubebuilder/v4@"+Version)), &dl); err != nil || dl.Dir == "" {
		t.Fatalf("downloading kubebuilder %s: %v %s", Version, err, dl.Error)
	}
	kubebuilder = filepath.Join(bin, "kubebuilder")
	Run(t, dl.Dir, "go", "build", "-o", kubebuilder, ".")
	controllerGen, err := controllergen.Binary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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
		"-require", "github.com/opzero/opzero@v0.0.0-00010101000000-000000000000")
	Run(t, dir, "go", "mod", "tidy")
	KeptVersions(t, dir)
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
	dir = Scaffolded(t)
	// The migration of cmd/main.go (testdata/main.go.diff).
	mainGo := filepath.Join(dir, "cmd/main.go")
	before, err := os.ReadFile(mainGo)
	if err != nil {
		t.Fatal(err)
	}
	// -C1: kubebuilder releases differ around the lines (v4.7.1 has no CertDir lines before NewManager)
	Run(t, dir, "git", "apply", "-C1", "--unidiff-zero", filepath.Join(testdata(t), "main.go.diff"))
	return dir, before
}

// Scaffolded generates the kubebuilder project with the user's API field
// and reconciler, its CRDs and RBAC as its make manifests writes them, and
// nothing of opzero: cmd/main.go as kubebuilder wrote it.
func Scaffolded(t testing.TB) (dir string) {
	t.Helper()
	kb, cg := Tools(t)
	dir = filepath.Join(t.TempDir(), "memcached")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, dir, kb, "init", "--domain", "example.com", "--repo", "example.com/memcached", "--skip-go-version-check")
	Run(t, dir, kb, "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", "Memcached", "--resource", "--controller", "--make=false")
	KeepGoMod(t, dir)

	// The user's operator, as it is before opzero: a size in the spec, the
	// tutorial's reconciler, the generated deep copies.
	types := filepath.Join(dir, "api/v1alpha1/memcached_types.go")
	ReplaceIn(t, types, "Foo *string `json:\"foo,omitempty\"`", "Size int32 `json:\"size,omitempty\"`")
	if b, _ := os.ReadFile(types); !bytes.Contains(b, []byte("Conditions []metav1.Condition")) {
		// kubebuilder before v4.10 scaffolds no status conditions: the tutorial adds them
		ReplaceIn(t, types, "type MemcachedStatus struct {\n", "type MemcachedStatus struct {\n\tConditions []metav1.Condition `json:\"conditions,omitempty\"`\n")
	}
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
	return dir
}

// ManagerEnv declares an environment variable of the manager in the
// project's config/manager/manager.yaml, as a kubebuilder user does for
// what the reconciler reads (MEMCACHED_IMAGE, in the operator-sdk
// tutorial).
func ManagerEnv(t testing.TB, dir, name, value string) {
	t.Helper()
	const line = "        name: manager\n"
	ReplaceIn(t, filepath.Join(dir, "config/manager/manager.yaml"), line,
		line+"        env:\n        - name: "+name+"\n          value: "+value+"\n")
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

// Release renders the project's release as its `make build-installer`
// does (kustomize build config/default), with its kustomization's
// namespace and namePrefix set to ns and prefix: one of several releases
// of the project installed side by side. The kustomization is left as it
// was.
func Release(t testing.TB, dir, ns, prefix string) []byte {
	t.Helper()
	kz := filepath.Join(dir, "config", "default", "kustomization.yaml")
	orig, err := os.ReadFile(kz)
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(kz, orig, 0o644)
	nsLine, prefixLine := regexp.MustCompile(`(?m)^namespace: .*$`), regexp.MustCompile(`(?m)^namePrefix: .*$`)
	if !nsLine.Match(orig) || !prefixLine.Match(orig) {
		t.Fatalf("%s has no namespace or namePrefix line (kubebuilder %s scaffolds differently?)", kz, Version)
	}
	k := nsLine.ReplaceAll(orig, []byte("namespace: "+ns))
	k = prefixLine.ReplaceAll(k, []byte("namePrefix: "+prefix))
	if err := os.WriteFile(kz, k, 0o644); err != nil {
		t.Fatal(err)
	}
	y, err := kustomize.Render(filepath.Dir(kz))
	if err != nil {
		t.Fatal(err)
	}
	return y
}
