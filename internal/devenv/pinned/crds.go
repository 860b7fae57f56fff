package pinned

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// crdFiles are the Knative CRDs opzero installs, by module and path inside
// it: Service (with Configuration, Revision and Route), ApiServerSource,
// PingSource, Broker and Trigger.
var crdFiles = []struct{ mod, file string }{
	{"knative.dev/serving", "config/core/300-resources/service.yaml"},
	{"knative.dev/serving", "config/core/300-resources/configuration.yaml"},
	{"knative.dev/serving", "config/core/300-resources/revision.yaml"},
	{"knative.dev/serving", "config/core/300-resources/route.yaml"},
	{"knative.dev/eventing", "config/core/resources/apiserversource.yaml"},
	{"knative.dev/eventing", "config/core/resources/pingsource.yaml"},
	{"knative.dev/eventing", "config/core/resources/broker.yaml"},
	{"knative.dev/eventing", "config/core/resources/trigger.yaml"},
}

// crdName is a CRD's file name in the CRD folder: serving-service.yaml.
func crdName(mod, file string) string {
	return strings.TrimPrefix(mod, "knative.dev/") + "-" + path.Base(file)
}

// CRDs returns the files of Knative's CRDs in the versions the pins name,
// from the knative-crds folder next to the binaries: in the --bin-dir flag,
// else $OPZERO_BIN_DIR, else the versioned cache, where they are fetched
// (through the Go module proxy) the first time.
func (r Resolver) CRDs(ctx context.Context) ([]string, error) {
	srcs, err := r.sources()
	if err != nil {
		return nil, err
	}
	last := srcs[len(srcs)-1]
	if files := crdPaths(last.dir); files != nil {
		return files, nil
	}
	switch {
	case last.user:
		return nil, fmt.Errorf("Knative's CRDs are not in %s (%s): put them there with `opzero install --bin-dir %s knative`, or %s to use opzero's cache",
			filepath.Join(last.dir, CRDFolder), last.what, last.dir, last.instead())
	case r.NoBuild:
		return nil, fmt.Errorf("Knative's CRDs are not in %s: fetch them with `opzero install knative`", filepath.Join(last.dir, CRDFolder))
	}
	if err := r.installCRDs(ctx, last.dir); err != nil {
		return nil, err
	}
	return crdPaths(last.dir), nil
}

// crdPaths returns the CRD files in dir/knative-crds, nil unless all are there.
func crdPaths(dir string) []string {
	var out []string
	for _, c := range crdFiles {
		p := filepath.Join(dir, CRDFolder, crdName(c.mod, c.file))
		if _, err := os.Stat(p); err != nil {
			return nil
		}
		out = append(out, p)
	}
	return out
}

// installCRDs copies Knative's CRDs into dir/knative-crds from the module
// downloads of the pinned versions (`go mod download` in the pinned module).
func (r *Resolver) installCRDs(ctx context.Context, dir string) error {
	if crdPaths(dir) != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, CRDFolder), 0o755); err != nil {
		return err
	}
	unlock, err := Lock(ctx, dir, r.progress())
	if err != nil {
		return err
	}
	defer unlock()
	g, _ := groupByName("knative")
	src, err := writeModule(dir, g)
	if err != nil {
		return err
	}
	mods, err := moduleDirs(ctx, src, "knative.dev/serving", "knative.dev/eventing")
	if err != nil {
		return err
	}
	for _, c := range crdFiles {
		from := filepath.Join(mods[c.mod], c.file)
		b, err := os.ReadFile(from)
		if err != nil {
			return fmt.Errorf("Knative CRD %s missing from the %s download: %w", c.file, c.mod, err)
		}
		err = place(filepath.Join(dir, CRDFolder), crdName(c.mod, c.file), func(tmp string) error { return os.WriteFile(tmp, b, 0o644) })
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(r.progress(), "opzero: Knative's CRDs (%s) are in %s\n", g.require("knative.dev/eventing"), filepath.Join(dir, CRDFolder))
	return nil
}

// moduleDirs runs `go mod download -json` in dir (so dir's go.mod chooses
// the versions) and returns each module's extracted folder.
func moduleDirs(ctx context.Context, dir string, mods ...string) (map[string]string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("fetching Knative's CRDs needs Go (go on PATH) and the Go module proxy: install Go, or give --bin-dir / %s a folder with a %s folder", Env, CRDFolder)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "download", "-json"}, mods...)...)
	cmd.Dir, cmd.Env = dir, goEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("downloading %v with `go mod download` in %s (needs the Go module proxy): %w\n%s%s",
			mods, dir, err, stderr.String(), stdout.String())
	}
	out := map[string]string{}
	dec := json.NewDecoder(&stdout)
	for {
		var m struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading `go mod download -json`: %w", err)
		}
		if m.Error != "" {
			return nil, fmt.Errorf("downloading %s@%s: %s", m.Path, m.Version, m.Error)
		}
		out[m.Path] = m.Dir
	}
	for _, m := range mods {
		if out[m] == "" {
			return nil, fmt.Errorf("`go mod download` did not report %s", m)
		}
	}
	return out, nil
}

// KnativeModules returns the folders of the pinned Knative modules the
// named paths choose (knative.dev/serving, knative.dev/eventing and the
// modules their release YAMLs take files from, knative.dev/networking and
// knative.dev/caching), downloaded through the Go module proxy into Go's
// module cache when missing.
func (r Resolver) KnativeModules(ctx context.Context, paths ...string) (map[string]string, error) {
	dir, err := r.Target()
	if err != nil {
		return nil, err
	}
	g, _ := groupByName("knative")
	src, err := writeModule(dir, g)
	if err != nil {
		return nil, err
	}
	return moduleDirs(ctx, src, paths...)
}
