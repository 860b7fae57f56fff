package ownsource

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ModulePath is opzero's module path.
const ModulePath = "github.com/opzero/opzero"

// Own reports whether pkg is an import path of opzero's module.
func Own(pkg string) bool {
	return pkg == ModulePath || strings.HasPrefix(pkg, ModulePath+"/")
}

// Root is the opzero module this program was built from.
func Root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", errors.New("this opzero was built with -trimpath (or without its source): its own source is unknown; " +
			"run from a Go module that requires " + ModulePath)
	}
	if dir, ok := ModuleAbove(filepath.Dir(file)); ok {
		return dir, nil
	}
	return "", errors.New("the source this opzero was built from (" + filepath.Dir(file) + ") is not on this machine; " +
		"run from a Go module that requires " + ModulePath)
}

// ModuleAbove is the folder at or above dir whose go.mod declares
// ModulePath, if there is one.
func ModuleAbove(dir string) (string, bool) {
	for {
		if declares(filepath.Join(dir, "go.mod")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func declares(gomod string) bool {
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
