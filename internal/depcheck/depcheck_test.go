// Package depcheck enforces the dependency budget: binary size is cold-start
// time, and library users must not inherit what only our tools need.
package depcheck

import (
	"encoding/json"
	"io"
	"os/exec"
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

func TestDependencyBudget(t *testing.T) {
	const mod = "github.com/opzero/opzero/"
	rules := []struct {
		pkg       string
		forbidden []string // import path prefixes
		stdlib    bool     // only the standard library (and the package itself)
	}{
		{pkg: mod + "keyq", stdlib: true},
		{pkg: mod + "backoff", stdlib: true},
		// outcome needs reconcile.Result; controller-runtime's pkg/reconcile
		// itself pulls in client-go (informers, leader election), so only the
		// event SDK is kept out here.
		{pkg: mod + "outcome", forbidden: []string{"github.com/cloudevents"}},
		{pkg: mod + "cloudevent", forbidden: []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go"}},
		{pkg: mod + "devenv/controlplane", forbidden: []string{"sigs.k8s.io/controller-runtime"}},
		{pkg: mod + "devenv/knative", forbidden: []string{"sigs.k8s.io/controller-runtime", "knative.dev"}},
		{pkg: mod + "devenv/dev", forbidden: []string{"sigs.k8s.io/controller-runtime", "knative.dev"}},
		{pkg: mod + "devenv/activator", stdlib: true},
		// the wire format of an operator's self-description
		{pkg: mod + "describe", stdlib: true},
		// controller-tools is for the CLI's manifest generator, never in an operator binary
		{pkg: mod + "operator", forbidden: []string{"sigs.k8s.io/controller-tools", "golang.org/x/tools/go/packages"}},
		{pkg: mod + "examples/configwatcher", forbidden: []string{"sigs.k8s.io/controller-tools", "golang.org/x/tools/go/packages"}},
		{pkg: mod + "...", forbidden: []string{"k8s.io/kubernetes", "knative.dev", "go.etcd.io/etcd/server"}},
	}
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			for _, d := range deps(t, r.pkg) {
				if r.stdlib && !d.Standard && d.ImportPath != r.pkg {
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

// TestServerlessOnlyBuild: -tags opzero_serverless keeps the controller-runtime
// manager (and what only it needs) out of a serverless operator's binary;
// without the tag the same operator runs either mode.
func TestServerlessOnlyBuild(t *testing.T) {
	const example = "github.com/opzero/opzero/examples/configwatcher"
	managerOnly := []string{"sigs.k8s.io/controller-runtime/pkg/manager", "sigs.k8s.io/controller-runtime/pkg/webhook", "github.com/opzero/opzero/engine/classic"}
	has := func(ps []pkg, path string) bool {
		for _, p := range ps {
			if p.ImportPath == path {
				return true
			}
		}
		return false
	}
	slim, full := deps(t, example, "opzero_serverless"), deps(t, example)
	for _, m := range managerOnly {
		if has(slim, m) {
			t.Errorf("-tags opzero_serverless: %s is still linked", m)
		}
		if !has(full, m) {
			t.Errorf("without the tag %s should be linked (classic mode)", m)
		}
	}
}
