package controlplane

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is the module whose checkout holds the bin/ folder.
const ModulePath = "github.com/opzero/opzero"

// BinDir returns the folder holding the pinned binaries: $OPZERO_BIN_DIR if
// set, else bin/ at the root of the opzero checkout that contains the working
// directory (tests run inside it).
func BinDir() (string, error) {
	if d := os.Getenv("OPZERO_BIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot walks up from the working directory to the folder whose go.mod
// declares ModulePath.
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
			return "", errors.New("not inside an opzero checkout (no go.mod declaring " + ModulePath +
				" above the working directory): run from the checkout or set OPZERO_BIN_DIR to the folder with the control-plane binaries")
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
