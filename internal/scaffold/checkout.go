package scaffold

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/mod/modfile"
)

// Module is opzero's module path.
const Module = "github.com/opzero/opzero"

// unpublished is the version go.mod requires of a module that only a
// replace directive provides.
const unpublished = "v0.0.0-00010101000000-000000000000"

// LocalCheckout returns the folder of the opzero checkout this binary was
// built from, or "" if it was built from a module download (or with
// -trimpath). That is the case of `go build` inside the checkout and of
// `go install` from a module that replaces opzero with a local folder.
func LocalCheckout() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	local := bi.Main.Path == Module
	for _, d := range bi.Deps {
		if d.Path == Module && d.Replace != nil && d.Replace.Version == "" {
			local = true // a folder replacement
		}
	}
	if !local {
		return ""
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "" // -trimpath
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/scaffold/checkout.go
	if isOpzeroModule(root) {
		return root
	}
	return ""
}

// opzeroVersion is the version of opzero this binary was built from, if it
// came from a module download.
func opzeroVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == Module && strings.HasPrefix(bi.Main.Version, "v") {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == Module && d.Replace == nil {
			return d.Version
		}
	}
	return ""
}

func isOpzeroModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && modfile.ModulePath(b) == Module
}
