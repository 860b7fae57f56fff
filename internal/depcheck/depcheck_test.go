// Package depcheck enforces the dependency budget: binary size is cold-start
// time, and library users must not inherit what only our tools need.
package depcheck

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Standard   bool
}

func deps(t *testing.T, path string, tags ...string) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", strings.Join(tags, ","), "-deps", "-json=ImportPath,Standard", path).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", path, err)
	}
	var ps []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return ps
		} else if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
}

const mod = "github.com/opzero/opzero/"

// cliOnly is what only the opzero CLI may link: the package loader, cobra,
// kustomize's library (reading and rendering kustomizations), and the
// local platform.
var cliOnly = []string{"golang.org/x/tools/go/packages", "github.com/spf13/cobra", "sigs.k8s.io/kustomize",
	mod + "internal/kustomize", mod + "internal/manifests", mod + "internal/devenv", mod + "cmd/"}

func TestDependencyBudget(t *testing.T) {
	rules := []struct {
		pkg       string
		forbidden []string // import path prefixes
		stdlib    bool     // only the standard library (and the package itself)
		allow     []string // with stdlib: leaf packages allowed besides
	}{
		// k8s.io/utils/clock imports only the standard library: the injected
		// clock tests step instead of sleeping.
		{pkg: mod + "internal/keyq", stdlib: true, allow: []string{"k8s.io/utils/clock"}},
		{pkg: mod + "internal/backoff", stdlib: true, allow: []string{"k8s.io/utils/clock"}},
		// what every test may use, so no controller-runtime
		{pkg: mod + "internal/testkit", stdlib: true},
		{pkg: mod + "internal/cloudevent", forbidden: []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go"}},
		{pkg: mod + "internal/devenv/controlplane", forbidden: []string{"sigs.k8s.io/controller-runtime"}},
		{pkg: mod + "internal/devenv/knative", forbidden: []string{"sigs.k8s.io/controller-runtime", "knative.dev"}},
		{pkg: mod + "internal/devenv/dev", forbidden: []string{"sigs.k8s.io/controller-runtime", "knative.dev"}},
		{pkg: mod + "internal/devenv/activator", stdlib: true, allow: []string{mod + "internal/localport"}},
		{pkg: mod + "internal/localport", stdlib: true},
		{pkg: mod + "internal/devenv/broker", forbidden: []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "knative.dev"}},
		// Knative's filter semantics, ported: what an operator binary links
		{pkg: mod + "internal/eventfilter", forbidden: []string{"sigs.k8s.io/controller-runtime", "k8s.io/", "knative.dev"}},
		// the wire format of an operator's self-description
		{pkg: mod + "internal/description", stdlib: true},
		// the wire format of a plan, which the CLI reads (and plan mode's
		// machinery, linked into every operator: no manager, no CLI)
		{pkg: mod + "internal/plan", stdlib: true},
		{pkg: mod + "internal/planner", forbidden: append(append([]string(nil), cliOnly...), managerOnly...)},
		// The public packages (what a user imports) and an operator binary
		// link neither the CLI's tools nor the local platform.
		{pkg: mod + "operator", forbidden: append(append([]string(nil), cliOnly...), managerOnly...)},
		{pkg: mod + "builder", forbidden: cliOnly},
		{pkg: mod + "reconcileutil", forbidden: cliOnly},
		{pkg: mod + "testenv", forbidden: []string{"golang.org/x/tools/go/packages", "github.com/spf13/cobra", "sigs.k8s.io/kustomize", mod + "internal/manifests", mod + "cmd/"}},
		{pkg: mod + "api/v1alpha1", forbidden: cliOnly},
		{pkg: mod + "examples/configwatcher", forbidden: cliOnly},
		{pkg: mod + "internal/metacontroller", forbidden: cliOnly},
		{pkg: mod + "cmd/opzero-metacontroller", forbidden: []string{"golang.org/x/tools/go/packages",
			"github.com/spf13/cobra", "sigs.k8s.io/kustomize", mod + "internal/manifests", mod + "internal/devenv", mod + "cmd/opzero/"}},
		// the hub is an always-on binary and a library of the CLI's: no kustomize
		{pkg: mod + "internal/hub/...", forbidden: []string{"sigs.k8s.io/kustomize", mod + "internal/kustomize"}},
		// The always-on parts, the wakeup source and the hub: small binaries
		// with neither the CLI nor controller-runtime beyond the scheme
		// builder of the API types (client-go's dynamic client is all they
		// need; controller-runtime's metrics package alone linked client-go's
		// whole clientset into the wakeup source, twice its size).
		{pkg: mod + "cmd/wakeup-source", forbidden: alwaysOn},
		{pkg: mod + "cmd/opzero-hub", forbidden: alwaysOn},
		// No package links controller-tools: the CLI runs controller-gen as
		// a program (internal/controllergen), so the module requires none of
		// it and adopting opzero moves no version in a kubebuilder
		// project's go.mod (issue 28).
		{pkg: mod + "...", forbidden: []string{"k8s.io/kubernetes", "knative.dev", "go.etcd.io/etcd/server", "sigs.k8s.io/controller-tools"}},
	}
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			for _, d := range deps(t, r.pkg) {
				if r.stdlib && !d.Standard && d.ImportPath != r.pkg && !slices.Contains(r.allow, d.ImportPath) {
					t.Errorf("%s must use only the standard library; it imports %s", r.pkg, d.ImportPath)
				}
				for _, f := range r.forbidden {
					if strings.HasPrefix(d.ImportPath, f) {
						t.Errorf("%s must not import %s (found %s)", r.pkg, f, d.ImportPath)
					}
				}
			}
		})
	}
}

// alwaysOn is what the always-on binaries (wakeup source, hub) must not
// link: the CLI, the engine, and controller-runtime beyond its scheme
// builder, client-go's typed clientset, and the CloudEvents SDK's
// protocol/http (its package makes a zap logger at init, 448 KiB of heap
// kept: they only send events, with cloudevent.NewRequest).
var alwaysOn = []string{"golang.org/x/tools/go/packages",
	"github.com/spf13/cobra", "sigs.k8s.io/kustomize", "github.com/opzero/opzero/internal/manifests", "github.com/opzero/opzero/internal/devenv", "github.com/opzero/opzero/cmd/opzero/",
	"github.com/opzero/opzero/internal/engine", "sigs.k8s.io/controller-runtime/pkg/manager", "sigs.k8s.io/controller-runtime/pkg/metrics",
	"sigs.k8s.io/controller-runtime/pkg/client", "sigs.k8s.io/controller-runtime/pkg/cache", "k8s.io/client-go/kubernetes",
	"github.com/cloudevents/sdk-go/v2/protocol", "go.uber.org/zap"}

// managerOnly is what only classic mode links: package operator must not
// import it, so that a binary links it only when its main imports
// operator/classic.
var managerOnly = []string{"sigs.k8s.io/controller-runtime/pkg/manager", "sigs.k8s.io/controller-runtime/pkg/webhook",
	mod + "internal/engine/classic", mod + "operator/classic"}

// TestClassicLinkedOnlyByImport: the ConfigWatcher example's default build
// links no part of the controller-runtime manager, and refuses
// --mode=classic naming the import that links it; built with -tags
// opzero_classic (its classic.go imports operator/classic) it links them.
func TestClassicLinkedOnlyByImport(t *testing.T) {
	const example = mod + "examples/configwatcher"
	has := func(ps []pkg, path string) bool {
		for _, p := range ps {
			if p.ImportPath == path {
				return true
			}
		}
		return false
	}
	def, linked := deps(t, example), deps(t, example, "opzero_classic")
	for _, m := range managerOnly {
		if has(def, m) {
			t.Errorf("the default build links %s", m)
		}
		if !has(linked, m) {
			t.Errorf("-tags opzero_classic: %s should be linked (classic mode)", m)
		}
	}
	if testing.Short() {
		return
	}
	bin := filepath.Join(t.TempDir(), "configwatcher")
	if out, err := exec.Command("go", "build", "-o", bin, example).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig") // loads; nothing is reached
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
		"users: [{name: x, user: {}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--mode=classic")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `import _ "github.com/opzero/opzero/operator/classic"`) {
		t.Fatalf("--mode=classic in the default build: %v\n%s\nwant a failure naming the import", err, out)
	}
	// Said before anything is read: with no API server configured at all,
	// the error is still the import, not the missing kubeconfig.
	cmd = exec.Command(bin, "--mode=classic")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "absent"), "KUBERNETES_SERVICE_HOST=")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `import _ "github.com/opzero/opzero/operator/classic"`) {
		t.Fatalf("--mode=classic in the default build, no kubeconfig: %v\n%s\nwant a failure naming the import first", err, out)
	}
}

// TestProfilingLinkedOnlyByTag: the binaries bench/suite -pprof profiles
// link runtime/pprof (internal/profile's hook) only when built with -tags
// opzero_pprof; the measured builds link none of it.
func TestProfilingLinkedOnlyByTag(t *testing.T) {
	for _, bin := range []string{mod + "examples/configwatcher", mod + "internal/testop"} {
		t.Run(bin, func(t *testing.T) {
			linked := func(ps []pkg) bool {
				return slices.ContainsFunc(ps, func(p pkg) bool { return p.ImportPath == "runtime/pprof" })
			}
			if linked(deps(t, bin)) {
				t.Errorf("the default build links runtime/pprof")
			}
			if !linked(deps(t, bin, "opzero_pprof")) {
				t.Errorf("-tags opzero_pprof: runtime/pprof should be linked (internal/profile)")
			}
		})
	}
}
