package kubebuilder_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// kubebuilderVersion is the kubebuilder release the projects are generated
// with (the module proxy's; `go list -m -versions` lists them): by default
// v4.7.1, which scaffolds controller-runtime v0.21.0, k8s.io v0.33.0 and go
// 1.24.0, the oldest opzero supports. OPZERO_KUBEBUILDER picks another
// (hack/matrix.sh: v4.13.1 scaffolds v0.23.3, v4.16.0 v0.25.0).
var kubebuilderVersion = func() string {
	if v := os.Getenv("OPZERO_KUBEBUILDER"); v != "" {
		return v
	}
	return "v4.7.1"
}()

// goModBefore is where the generated project's go.mod is kept before its
// adoption, beside the project's folder.
func goModBefore(dir string) string { return filepath.Join(filepath.Dir(dir), "go.mod.before") }

// keepGoMod records the project's go.mod before the adoption.
func keepGoMod(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goModBefore(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// keptVersions: adopting opzero (requiring it, go mod tidy) changed neither
// the project's go directive nor the version of any module it requires
// directly (controller-runtime, k8s.io, ginkgo, gomega); it logs the
// indirect requirements whose version moved.
func keptVersions(t *testing.T, dir string) {
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
		v, ok := now[r.Mod.Path]
		switch {
		case !r.Indirect && v != r.Mod.Version:
			t.Errorf("go.mod's requirement %s %s became %q", r.Mod.Path, r.Mod.Version, v)
		case ok && v != r.Mod.Version:
			moved = append(moved, r.Mod.Path+" "+r.Mod.Version+" -> "+v)
		}
	}
	t.Logf("kubebuilder %s project: go %s, direct requirements unchanged by the adoption; indirect ones moved: %d %s",
		kubebuilderVersion, after.Go.Version, len(moved), strings.Join(moved, ", "))
}

// TestKubebuilderWebhookAdopted: the webhook kubebuilder scaffolds at the
// project's controller-runtime (ctrl.NewWebhookManagedBy(mgr).For(&X{})
// before v0.23, ctrl.NewWebhookManagedBy(mgr, &X{}) after) builds and vets
// unchanged once cmd/main.go is migrated and opzero required: the project
// keeps its controller-runtime.
func TestKubebuilderWebhookAdopted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kubebuilder and a project")
	}
	kb, cg := tools(t)
	dir := filepath.Join(t.TempDir(), "memcached")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, kb, "init", "--domain", "example.com", "--repo", "example.com/memcached", "--skip-go-version-check")
	run(t, dir, kb, "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", "Memcached", "--resource", "--controller", "--make=false")
	run(t, dir, kb, "create", "webhook", "--group", "cache", "--version", "v1alpha1", "--kind", "Memcached", "--defaulting", "--programmatic-validation", "--make=false")
	run(t, dir, cg, "object:headerFile=hack/boilerplate.go.txt", "paths=./api/...")
	keepGoMod(t, dir)
	hook, err := os.ReadFile(filepath.Join(dir, "internal/webhook/v1alpha1/memcached_webhook.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(hook), "\n") {
		if strings.Contains(l, "NewWebhookManagedBy") {
			t.Logf("kubebuilder %s webhook: %s", kubebuilderVersion, strings.TrimSpace(l))
		}
	}
	run(t, dir, "git", "apply", "-C1", "--unidiff-zero", filepath.Join(wd(t), "testdata/main.go.diff"))
	run(t, dir, "go", "mod", "edit", "-replace", "github.com/opzero/opzero="+checkoutRoot(t))
	run(t, dir, "go", "mod", "tidy")
	keptVersions(t, dir)
	run(t, dir, "go", "build", "./...")
	run(t, dir, "go", "vet", "./...")
}
