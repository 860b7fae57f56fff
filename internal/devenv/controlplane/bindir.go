package controlplane

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/opzero/opzero/internal/devenv/pinned"
	"github.com/opzero/opzero/internal/ownsource"
)

// ModulePath is opzero's module path.
const ModulePath = ownsource.ModulePath

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
	if root, ok := ownsource.ModuleAbove(dir); ok {
		return root, nil
	}
	return "", errors.New("not inside an opzero checkout (no go.mod declaring " + ModulePath + " above the working directory): run this from the checkout")
}
