package pinned

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Resolver finds opzero's pinned binaries and Knative's CRDs. The zero
// value looks where the package doc says and builds what is missing.
type Resolver struct {
	// Dir is the --bin-dir flag: when set, the only folder looked in.
	Dir string
	// Progress receives what a build prints (an estimate first, then a
	// progress line every few seconds); nil means os.Stderr.
	Progress io.Writer
	// From are folders whose binaries are taken (hard-linked, else copied)
	// instead of built, where their stamp (.controlplane.pins,
	// .knative.pins) shows the same pins: a bin/ built by an older
	// `make bins`, or another cache.
	From []string
	// NoBuild turns a missing binary into an error instead of a build.
	NoBuild bool

	getenv   func(string) string // os.Getenv; tests replace it
	cacheDir func() (string, error)
}

// source is one place binaries are looked for.
type source struct {
	what string   // for messages: "--bin-dir /x", "OPZERO_BIN_DIR=/x", ...
	dir  string   // the folder
	only []string // if set, the only binaries looked for there
	user bool     // named by the user: everything must be there, nothing is built
}

// instead says how to use the cache instead of a folder the user named.
func (s source) instead() string {
	if strings.HasPrefix(s.what, "--") {
		return "leave out --bin-dir"
	}
	return "unset " + Env
}

func (r *Resolver) env(k string) string {
	if r.getenv != nil {
		return r.getenv(k)
	}
	return os.Getenv(k)
}

func (r *Resolver) cache() (string, error) {
	if r.cacheDir != nil {
		return r.cacheDir()
	}
	return CacheDir()
}

func (r *Resolver) progress() io.Writer {
	if r.Progress != nil {
		return r.Progress
	}
	return os.Stderr
}

// sources returns where to look, in order: the flag, else the environment
// variable, else envtest's KUBEBUILDER_ASSETS (for the binaries it has)
// and the versioned cache.
func (r *Resolver) sources() ([]source, error) {
	named := func(what, dir string) ([]source, error) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		if !isDir(abs) {
			return nil, fmt.Errorf("%s is not a folder: fill it with `opzero install --bin-dir %s`, or %s to use opzero's cache", what, dir, source{what: what}.instead())
		}
		return []source{{what: what, dir: abs, user: true}}, nil
	}
	if r.Dir != "" {
		return named("--bin-dir "+r.Dir, r.Dir)
	}
	if d := r.env(Env); d != "" {
		return named(Env+"="+d, d)
	}
	var out []source
	if d := r.env("KUBEBUILDER_ASSETS"); d != "" && isDir(d) {
		abs, _ := filepath.Abs(d)
		out = append(out, source{what: "KUBEBUILDER_ASSETS=" + d, dir: abs, only: kubebuilderAssets})
	}
	cache, err := r.cache()
	if err != nil {
		return nil, err
	}
	return append(out, source{what: "opzero's cache " + cache, dir: cache}), nil
}

// Find returns the paths of the named binaries (Etcd, KubeAPIServer, ...),
// in order. Looked for in the --bin-dir flag (Dir), else in $OPZERO_BIN_DIR,
// else in $KUBEBUILDER_ASSETS (etcd, kube-apiserver, kubectl only) and then
// the versioned cache; binaries missing from the cache are built into it
// first (unless NoBuild), with progress written to Progress.
func (r Resolver) Find(ctx context.Context, names ...string) ([]string, error) {
	srcs, err := r.sources()
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	var missing []string
	for i, n := range names {
		if _, _, err := lookup(n); err != nil {
			return nil, err
		}
		if paths[i] = find(srcs, n); paths[i] == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return paths, nil
	}
	last := srcs[len(srcs)-1]
	switch {
	case last.user:
		return nil, fmt.Errorf("%s not found in %s: put them there with `opzero install --bin-dir %s`, or %s to use opzero's cache (filled by `opzero install`, or on first use)",
			strings.Join(missing, ", "), last.what, last.dir, last.instead())
	case r.NoBuild:
		return nil, fmt.Errorf("%s not found in %s: build them there with `opzero install`, or point --bin-dir / %s at a folder that holds them",
			strings.Join(missing, ", "), last.what, Env)
	}
	if err := r.install(ctx, last.dir, missing); err != nil {
		return nil, err
	}
	for i, n := range names {
		if paths[i] == "" {
			paths[i] = filepath.Join(last.dir, n)
		}
	}
	return paths, nil
}

// FindOne is Find for a single binary.
func (r Resolver) FindOne(ctx context.Context, name string) (string, error) {
	p, err := r.Find(ctx, name)
	if err != nil {
		return "", err
	}
	return p[0], nil
}

func find(srcs []source, name string) string {
	for _, s := range srcs {
		if s.only != nil && !slices.Contains(s.only, name) {
			continue
		}
		if p := filepath.Join(s.dir, name); executable(p) {
			return p
		}
	}
	return ""
}

// Target is the folder Install fills: the --bin-dir flag, else
// $OPZERO_BIN_DIR, else the versioned cache.
func (r Resolver) Target() (string, error) {
	d := r.Dir
	if d == "" {
		d = r.env(Env)
	}
	if d == "" {
		return r.cache()
	}
	return filepath.Abs(d)
}

// Install makes sure every binary of the named sets ("controlplane",
// "knative", "otelcol", "cluster"; none means controlplane and knative) is
// in Target, and with "knative" Knative's CRDs too: it takes them from From
// or an older cache folder with the same pins, else builds them. It returns
// the folder. Nothing is rebuilt when the binaries are there. The cluster
// set (kubelet, kube-proxy, kube-scheduler, CoreDNS and the programs of the
// cluster's own images) comes with the control plane it runs on.
func (r Resolver) Install(ctx context.Context, sets ...string) (string, error) {
	if len(sets) == 0 {
		sets = []string{"controlplane", "knative"}
	}
	if slices.Contains(sets, "cluster") && !slices.Contains(sets, "controlplane") {
		sets = append([]string{"controlplane"}, sets...)
	}
	dir, err := r.Target()
	if err != nil {
		return "", err
	}
	var names []string
	crds := false
	for _, s := range sets {
		gs, err := setGroups(s)
		if err != nil {
			return "", err
		}
		for _, g := range gs {
			for _, b := range g.binaries {
				names = append(names, b.name)
			}
		}
		crds = crds || s == "knative"
	}
	if err := r.install(ctx, dir, names); err != nil {
		return "", err
	}
	if crds {
		if err := r.installCRDs(ctx, dir); err != nil {
			return "", err
		}
	}
	return dir, nil
}
