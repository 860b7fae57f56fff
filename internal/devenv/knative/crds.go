package knative

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// crdFiles are the CRDs opzero needs, by module and path inside it.
var crdFiles = map[string][]string{
	"knative.dev/serving": {
		"config/core/300-resources/service.yaml", "config/core/300-resources/configuration.yaml",
		"config/core/300-resources/revision.yaml", "config/core/300-resources/route.yaml",
	},
	"knative.dev/eventing": {
		"config/core/resources/apiserversource.yaml", "config/core/resources/pingsource.yaml",
		"config/core/resources/broker.yaml", "config/core/resources/trigger.yaml",
	},
}

// CRDs returns the paths of Knative's Service (with Configuration, Revision
// and Route), ApiServerSource, PingSource, Broker and Trigger CRDs inside the
// module downloads of the versions tools/knative pins. It downloads them
// through the Go module proxy if they are not in the module cache yet.
func CRDs(ctx context.Context) ([]string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	dirs, err := moduleDirs(ctx, filepath.Join(root, "tools", "knative"), "knative.dev/serving", "knative.dev/eventing")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mod := range []string{"knative.dev/serving", "knative.dev/eventing"} {
		for _, f := range crdFiles[mod] {
			p := filepath.Join(dirs[mod], f)
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("Knative CRD %s missing from the %s download: %w", f, mod, err)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// moduleDirs runs `go mod download -json` in dir (so dir's go.mod chooses
// the versions) and returns each module's extracted folder.
func moduleDirs(ctx context.Context, dir string, mods ...string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "download", "-json"}, mods...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("downloading %v with `go mod download` in %s (needs go on PATH and the Go module proxy): %w\n%s%s",
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
