package kubebuilder_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/pinned"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/testenv"
)

// TestProjectsOptionsAndMarkers: an adopted kubebuilder project whose
// spec embeds a pod template (a CRD over 256 KiB with its descriptions, as
// the CronJob tutorial's) and keeps an RBAC marker in its API package.
// Without crd options its Makefile gives, opzero manifests warns that the
// CRD is too large for client-side apply; with crd:maxDescLen=0 in the
// Makefile's controller-gen line, as the tutorial has, the CRD is
// generated with it and the output applies with `kubectl apply -k`
// (client-side) on a real API server; the API package's marker is in the
// ClusterRole.
func TestProjectsOptionsAndMarkers(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and adopts a kubebuilder project")
	}
	dir, _ := project(t)
	types := filepath.Join(dir, "api/v1alpha1/memcached_types.go")
	replaceIn(t, types, "Size int32 `json:\"size,omitempty\"`", "Size int32 `json:\"size,omitempty\"`\n\t// Template is the pod the operator runs.\n\tTemplate corev1.PodTemplateSpec `json:\"template,omitempty\"`")
	replaceIn(t, types, "import (\n", "import (\n\tcorev1 \"k8s.io/api/core/v1\"\n")
	replaceIn(t, types, "func init() {\n", "// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;patch\n\nfunc init() {\n")
	_, cg := tools(t)
	run(t, dir, cg, "object:headerFile=hack/boilerplate.go.txt", "paths=./api/...")

	ns := testenv.Get(t).Namespace(t)
	build := func() ([]manifests.Object, string) {
		var w bytes.Buffer
		objs, err := manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Namespace: ns, Warnings: &w})
		if err != nil {
			t.Fatal(err)
		}
		return objs, w.String()
	}
	crdSize := func(objs []manifests.Object) int {
		for _, o := range objs {
			if o.Kind() == "CustomResourceDefinition" && strings.HasPrefix(o.Name(), "memcacheds.") {
				return len(o.Raw)
			}
		}
		t.Fatal("no Memcached CRD in the output")
		return 0
	}
	objs, warnings := build()
	if n := crdSize(objs); n < 256<<10 || !strings.Contains(warnings, "client-side kubectl apply") {
		t.Fatalf("without the project's options: CRD %d bytes, warnings:\n%s\nwant one over 256 KiB and a warning about client-side apply", n, warnings)
	}

	// The tutorial's Makefile line.
	mk := filepath.Join(dir, "Makefile")
	b, err := os.ReadFile(mk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(" crd webhook ")) {
		t.Fatalf("the Makefile's controller-gen line changed (kubebuilder %s): no ' crd webhook '", "this release")
	}
	if err := os.WriteFile(mk, bytes.Replace(b, []byte(" crd webhook "), []byte(" crd:maxDescLen=0 webhook "), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, warnings = build()
	if n := crdSize(objs); n >= 256<<10 || strings.Contains(warnings, "client-side kubectl apply") {
		t.Fatalf("with crd:maxDescLen=0: CRD %d bytes, warnings:\n%s\nwant it under 256 KiB and no warning", n, warnings)
	}
	var rbac string
	for _, o := range objs {
		if o.Kind() == "ClusterRole" && o.File == manifests.FileRBAC {
			s, _ := manifests.Stream([]manifests.Object{o})
			rbac += string(s)
		}
	}
	if !strings.Contains(rbac, "statefulsets") {
		t.Errorf("the API package's +kubebuilder:rbac marker (statefulsets) is not in the ClusterRoles:\n%s", rbac)
	}

	out := filepath.Join(t.TempDir(), "deploy")
	if err := manifests.WriteOverlay(out, objs); err != nil {
		t.Fatal(err)
	}
	kubectl, err := pinned.Resolver{NoBuild: true}.Find(context.Background(), "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	// Twice, as with any output that has CRDs and objects of them: the
	// first apply's Subscription can come before its CRD is served ("no
	// matches for kind"); nothing else may fail.
	for i := 0; ; i++ {
		cmd := exec.Command(kubectl[0], "apply", "-k", out)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+testenv.Get(t).Kubeconfig)
		b, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		rest := regexp.MustCompile(`(?m)^error: resource mapping not found .*no matches for kind "Subscription".*\n(ensure CRDs are installed first\n)?`).ReplaceAllString(string(b), "")
		if i > 0 || strings.Contains(rest, "error") || strings.Contains(rest, "Too long") {
			t.Fatalf("kubectl apply -k %s (client-side): %v\n%s", out, err, b)
		}
	}
}
