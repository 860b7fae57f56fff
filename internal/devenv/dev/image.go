package dev

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opzero/opzero/internal/ownsource"
)

// KoPrefix marks an image that is a Go import path, as ko resolves it.
const KoPrefix = "ko://"

// importPath returns the Go import path of a ko:// image, or an error that
// says why opzero dev cannot run image.
func importPath(image, where string) (string, error) {
	p, ok := strings.CutPrefix(image, KoPrefix)
	if !ok || p == "" || strings.ContainsAny(p, " :@") {
		return "", fmt.Errorf("%s: image %q is not a ko:// image: opzero dev runs containers as local processes built with `go build`, "+
			"so it needs image: ko://<Go import path of a main package> (e.g. ko://github.com/opzero/opzero/examples/configwatcher); "+
			"`opzero manifests` writes such images", where, image)
	}
	return p, nil
}

// builder builds each import path once per run into a cache folder.
type builder struct {
	dir      string // where binaries land
	buildDir string // where `go build` runs (the module that resolves the import paths)
	prebuilt func(pkg string) ([]string, bool)
	mu       sync.Mutex
	built    map[string][]string
}

// DefaultCacheDir is where opzero dev keeps the binaries it builds:
// $XDG_CACHE_HOME/opzero/ko (or the OS equivalent).
func DefaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "opzero", "ko")
}

// build returns the command for the import path (the binary, then any
// leading arguments): Options.Prebuilt's if it has one, else a binary built
// with `go build` the first time it is asked for in this run (Go's build
// cache makes a rebuild of unchanged code fast).
func (b *builder) build(ctx context.Context, pkg string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if argv, ok := b.built[pkg]; ok {
		return argv, nil
	}
	if b.built == nil {
		b.built = map[string][]string{}
	}
	if b.prebuilt != nil {
		if argv, ok := b.prebuilt(pkg); ok {
			b.built[pkg] = argv
			return argv, nil
		}
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, err
	}
	exe := filepath.Join(b.dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
	dir, err := b.resolvingDir(ctx, pkg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building ko://%s with `go build` in %s: %w\n%s", pkg, dir, err, out)
	}
	b.built[pkg] = []string{exe}
	return b.built[pkg], nil
}

// resolvingDir is where pkg is built: buildDir, or, for one of opzero's
// own commands (ko://github.com/opzero/opzero/cmd/opzero-metacontroller)
// that buildDir's module does not resolve (a user's folder of YAML, no
// go.mod), the opzero source this CLI was built from (package ownsource).
func (b *builder) resolvingDir(ctx context.Context, pkg string) (string, error) {
	if !ownsource.Own(pkg) {
		return b.buildDir, nil
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}", pkg)
	cmd.Dir = b.buildDir
	if cmd.Run() == nil {
		return b.buildDir, nil
	}
	root, err := ownsource.Root()
	if err != nil {
		return "", fmt.Errorf("ko://%s is opzero's own, and %s is no Go module that has it: %w (or pass --build-dir)", pkg, b.buildDir, err)
	}
	return root, nil
}
