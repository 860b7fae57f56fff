// Package controllergen runs controller-gen, the generator of kubebuilder
// projects' CRDs, RBAC, webhook configurations and DeepCopy methods, as a
// program: the way kubebuilder projects run it (make manifests).
//
// Guarantees: controller-gen is Version, built once per machine into the
// user cache (a file lock: parallel test packages build it once), or the
// one $OPZERO_CONTROLLER_GEN names. Errors carry the tail of its stderr.
//
// Why a program and not controller-tools as a library: opzero's CLI is in
// the library's module, so a library import would make every project that
// adopts opzero require controller-tools, and with it newer cobra, pflag and
// golang.org/x modules than the project has.
package controllergen

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/opzero/opzero/internal/devenv/pinned"
)

// Version is the controller-tools release opzero runs.
const Version = "v0.18.0"

// Env names a controller-gen binary to run instead of the cached one.
const Env = "OPZERO_CONTROLLER_GEN"

const pkg = "sigs.k8s.io/controller-tools/cmd/controller-gen"

// Binary returns the controller-gen to run: $OPZERO_CONTROLLER_GEN, else
// ~/.cache/opzero/controller-gen-<Version>/controller-gen, built there
// (go install, module-aware, outside any project) the first time.
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(Env); p != "" {
		if !executable(p) {
			return "", fmt.Errorf("%s=%s is not an executable file: point it at a controller-gen %s, or unset it and opzero builds one into its cache", Env, p, Version)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache folder to build controller-gen into (%v): set XDG_CACHE_HOME or HOME, or %s to a controller-gen %s", err, Env, Version)
	}
	dir := filepath.Join(cache, "opzero", "controller-gen-"+Version)
	bin := filepath.Join(dir, "controller-gen")
	if executable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s for controller-gen: %w", dir, err)
	}
	unlock, err := pinned.Lock(ctx, dir, os.Stderr)
	if err != nil {
		return "", err
	}
	defer unlock()
	if executable(bin) { // another process built it while we waited
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "opzero: building controller-gen %s into %s ... (once)\n", Version, dir)
	if err := build(ctx, dir, Version); err != nil {
		return "", err
	}
	return bin, nil
}

// build installs controller-gen version into dir: into a temporary folder
// first, so that an interrupted build leaves no half-written binary.
func build(ctx context.Context, dir, version string) error {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", pkg+"@"+version)
	cmd.Dir = tmp
	// A project's GOFLAGS (-mod=mod) and go.work are not for this build.
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building controller-gen: go install %s@%s: %w\n%s\nopzero runs controller-gen for CRDs, RBAC, webhook configurations and DeepCopy methods: check that Go can reach the module proxy (GOPROXY), or build controller-gen %s yourself and set %s to its path",
			pkg, version, err, tail(out), version, Env)
	}
	return os.Rename(filepath.Join(tmp, "controller-gen"), filepath.Join(dir, "controller-gen"))
}

// Run runs controller-gen with args in dir (where it resolves paths=).
func Run(ctx context.Context, dir string, args ...string) error {
	bin, err := Binary(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("controller-gen %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, tail(stderr.Bytes()))
	}
	return nil
}

// Generate runs controller-gen's generator gen (as "crd:crdVersions=v1")
// on the Go packages pkgs, resolved in dir, and returns the files it
// writes, by name, as it writes them.
func Generate(ctx context.Context, dir, gen string, pkgs ...string) (map[string][]byte, error) {
	out, err := os.MkdirTemp("", "opzero-controller-gen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	if err := Run(ctx, dir, append(Args(gen, pkgs...), "output:dir="+out)...); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(out, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = b
	}
	return files, nil
}

// Args are the arguments of controller-gen's generator gen on the Go
// packages pkgs.
func Args(gen string, pkgs ...string) []string {
	args := []string{gen}
	for _, p := range pkgs {
		args = append(args, "paths="+p)
	}
	return args
}

// tail is the end of a command's output, enough to see its error.
func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
