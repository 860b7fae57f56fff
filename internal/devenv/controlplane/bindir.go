package controlplane

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/opzero/opzero/internal/devenv/pinned"
)

// ModulePath is opzero's module path.
const ModulePath = "github.com/opzero/opzero"

// BinDir returns the folder of the pinned binaries when they come from one
// place: $OPZERO_BIN_DIR if set, else the versioned user cache (package
// pinned; the checkout's bin/ links to it after `make bins`). Code that runs
// a binary should use pinned.Resolver, which also honours --bin-dir and
// KUBEBUILDER_ASSETS and builds what is missing.
func BinDir() (string, error) {
	if d := os.Getenv(pinned.Env); d != "" {
		return filepath.Abs(d)
	}
	return pinned.CacheDir()
}

// RepoRoot walks up from the working directory to the folder whose go.mod
// declares ModulePath: the opzero checkout (its tests and tools read files
// there; nothing a user runs needs it).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside an opzero checkout (no go.mod declaring " + ModulePath + " above the working directory): run this from the checkout")
		}
		dir = parent
	}
}

func declaresModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if mod, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.TrimSpace(mod) == ModulePath
		}
	}
	return false
}
