package kubebuilder_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/examples/kubebuilder/kbproject"
)

// kubebuilderVersion is the kubebuilder release the projects are generated
// with (kbproject.Version: OPZERO_KUBEBUILDER, else v4.7.1).
var kubebuilderVersion = kbproject.Version

func keepGoMod(t *testing.T, dir string)    { kbproject.KeepGoMod(t, dir) }
func keptVersions(t *testing.T, dir string) { kbproject.KeptVersions(t, dir) }

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
	run(t, dir, "git", "apply", "-C1", "--unidiff-zero", filepath.Join(checkoutRoot(t), "examples/kubebuilder/testdata/main.go.diff"))
	run(t, dir, "go", "mod", "edit", "-replace", "github.com/opzero/opzero="+checkoutRoot(t))
	run(t, dir, "go", "mod", "tidy")
	keptVersions(t, dir)
	run(t, dir, "go", "build", "./...")
	run(t, dir, "go", "vet", "./...")
}
