package pinned

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestModulesMatchTools: the embedded modules are the ones in tools/, which
// is where pins are changed (go get, go mod tidy).
func TestModulesMatchTools(t *testing.T) {
	tools := filepath.Join("..", "..", "..", "tools")
	for _, g := range groups {
		for _, f := range g.files {
			want, err := os.ReadFile(filepath.Join(tools, g.mod(), f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(g.file(f), want) {
				t.Errorf("modules/%s/%s.txt differs from tools/%s/%s: run `go generate ./internal/devenv/pinned`", g.mod(), f, g.mod(), f)
			}
		}
	}
}

func TestVersionNamesThePins(t *testing.T) {
	v := Version()
	if !strings.HasPrefix(v, "k8s-v1.34.3-knative-v0.50.0-") || len(v) != len("k8s-v1.34.3-knative-v0.50.0-")+8 {
		t.Errorf("Version() = %q, want k8s-v1.34.3-knative-v0.50.0-<8 hex digits>", v)
	}
	cp, _ := groupByName("controlplane")
	if got := cp.ldflags(); !strings.Contains(got, "gitVersion=v1.34.3") || !strings.Contains(got, "gitMinor=34") {
		t.Errorf("control plane ldflags %q do not carry v1.34.3", got)
	}
}

func TestEstimate(t *testing.T) {
	for _, tc := range []struct {
		work  float64
		cores int
		want  string
	}{
		{9, 2, "about 9 minutes the first time on 2 cores"},
		{9, 8, "about 3 minutes the first time on 8 cores"},
		{0.5, 4, "about 1 minute the first time on 4 cores"},
	} {
		if got := estimate(tc.work, tc.cores); !strings.HasPrefix(got, tc.want) {
			t.Errorf("estimate(%v, %d) = %q, want %q...", tc.work, tc.cores, got, tc.want)
		}
	}
}

// fakeBins writes executable stand-ins for names into a new folder, with
// the stamps of both sets if stamped.
func fakeBins(t *testing.T, stamped bool, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if stamped {
		for i := range groups {
			if err := writeStamp(dir, &groups[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// resolver returns a Resolver that sees env instead of the process
// environment and uses cache as its cache folder.
func resolver(env map[string]string, cache string) Resolver {
	return Resolver{NoBuild: true, Progress: &bytes.Buffer{},
		getenv: func(k string) string { return env[k] }, cacheDir: func() (string, error) { return cache, nil }}
}

func TestFindOrder(t *testing.T) {
	all := Names()
	flag := fakeBins(t, false, all...)
	env := fakeBins(t, false, all...)
	assets := fakeBins(t, false, Etcd, KubeAPIServer, Kubectl, KubeControllerManager) // envtest never has kcm: ignored
	cache := fakeBins(t, true, all...)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want map[string]string // binary -> folder
	}{
		{"flag first", flag, map[string]string{Env: env, "KUBEBUILDER_ASSETS": assets}, map[string]string{Etcd: flag, KubeControllerManager: flag, PingAdapter: flag}},
		{"then OPZERO_BIN_DIR", "", map[string]string{Env: env, "KUBEBUILDER_ASSETS": assets}, map[string]string{Etcd: env, KubeControllerManager: env, PingAdapter: env}},
		{"then KUBEBUILDER_ASSETS for envtest's binaries, the cache for the others", "", map[string]string{"KUBEBUILDER_ASSETS": assets},
			map[string]string{Etcd: assets, KubeAPIServer: assets, Kubectl: assets, KubeControllerManager: cache, ApiServerSourceAdapter: cache}},
		{"then the cache", "", nil, map[string]string{Etcd: cache, KubeAPIServer: cache, PingAdapter: cache}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resolver(tc.env, cache)
			r.Dir = tc.flag
			for bin, dir := range tc.want {
				got, err := r.FindOne(ctx, bin)
				if err != nil {
					t.Fatal(err)
				}
				if got != filepath.Join(dir, bin) {
					t.Errorf("%s found at %s, want it in %s", bin, got, dir)
				}
			}
		})
	}
}

func TestFindErrorsSayWhatToDo(t *testing.T) {
	partial := fakeBins(t, false, Etcd)
	empty := t.TempDir()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		flag string
		env  map[string]string
		want []string
	}{
		{"flag lacks one", partial, map[string]string{Env: fakeBins(t, false, Names()...)}, []string{"kube-apiserver not found in --bin-dir " + partial, "opzero install --bin-dir " + partial, "leave out --bin-dir"}},
		{"flag is no folder", filepath.Join(empty, "nope"), nil, []string{"is not a folder", "opzero install --bin-dir"}},
		{"env lacks one", "", map[string]string{Env: partial}, []string{"kube-apiserver not found in OPZERO_BIN_DIR=" + partial, "opzero install --bin-dir", "unset OPZERO_BIN_DIR"}},
		{"cache lacks one, no build", "", nil, []string{"not found in opzero's cache " + empty, "`opzero install`", "--bin-dir / OPZERO_BIN_DIR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resolver(tc.env, empty)
			r.Dir = tc.flag
			_, err := r.Find(ctx, Etcd, KubeAPIServer)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := resolver(nil, empty).Find(ctx, "kubeadm"); err == nil || !strings.Contains(err.Error(), "not one of opzero's pinned binaries") {
		t.Errorf("unknown binary: %v", err)
	}
}

// TestInstallTakesBinariesWithTheSamePins: a folder stamped with these pins
// (a bin/ from `make bins`, an older cache folder) gives its binaries by
// hard link; one stamped with other pins gives nothing.
func TestInstallTakesBinariesWithTheSamePins(t *testing.T) {
	ctx := context.Background()
	good := fakeBins(t, true, Names()...)
	stale := fakeBins(t, false, Names()...)
	for _, g := range []string{"controlplane", "knative"} {
		if err := os.WriteFile(filepath.Join(stale, "."+g+".pins"), []byte("0123\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	cache := filepath.Join(root, Version())
	r := resolver(nil, cache)
	r.NoBuild = false
	r.From = []string{stale, good}
	paths, err := r.Find(ctx, Names()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if filepath.Dir(p) != cache {
			t.Errorf("%s is not in the cache %s", p, cache)
		}
		if !same(p, filepath.Join(good, filepath.Base(p))) {
			t.Errorf("%s is not a link to the stamped folder's binary", p)
		}
	}
	for _, g := range groups {
		if b, err := os.ReadFile(g.stampFile(cache)); err != nil || strings.TrimSpace(string(b)) != g.stamp() {
			t.Errorf("stamp .%s.pins in the cache: %q, %v", g.name, b, err)
		}
	}

	// A newer cache folder (other pins) takes binaries from an older
	// sibling whose set's stamp still matches.
	next := filepath.Join(root, "k8s-v9-knative-v9-00000000")
	r2 := resolver(nil, next)
	r2.NoBuild = false
	r2.NoBuild = true // it must not need to build
	if p, err := r2.FindOne(ctx, KubeAPIServer); err == nil {
		t.Fatalf("found %s before any install", p)
	}
	r2.NoBuild = false
	if p, err := r2.FindOne(ctx, KubeAPIServer); err != nil {
		t.Fatal(err)
	} else if !same(p, filepath.Join(good, KubeAPIServer)) {
		t.Errorf("%s was not taken from the sibling cache folder", p)
	}
}

// TestBuildsWhatIsMissing builds etcd (the quickest binary: seconds once
// Go's build cache has it) from the embedded module into an empty cache,
// saying so with an estimate, and a second Find builds nothing.
func TestBuildsWhatIsMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	cache := filepath.Join(t.TempDir(), Version())
	var progress bytes.Buffer
	r := resolver(nil, cache)
	r.NoBuild, r.Progress = false, &progress
	p, err := r.FindOne(context.Background(), Etcd)
	if err != nil {
		t.Fatal(err)
	}
	out := progress.String()
	if !strings.Contains(out, "opzero: building etcd from pinned Go modules into "+cache+": about ") || !strings.Contains(out, "built etcd in") {
		t.Errorf("progress:\n%s\nwant the estimate and the end of the build", out)
	}
	v, err := exec.Command(p, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "etcd Version: 3.6.4") {
		t.Errorf("%s --version: %v\n%s", p, err, v)
	}
	progress.Reset()
	if _, err := r.FindOne(context.Background(), Etcd); err != nil || progress.Len() > 0 {
		t.Errorf("second Find: %v, printed %q; want nothing built", err, progress.String())
	}
}

// TestInstallOfWhatIsThereTakesNoLock: with every binary of a set in the
// folder, Install returns at once while another process holds the folder's
// lock to build other sets (a TestBook page once waited 10 minutes on an
// `opzero install cluster` that built into the same cache).
func TestInstallOfWhatIsThereTakesNoLock(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{Etcd, KubeAPIServer, KubeControllerManager, Kubectl} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	unlock, err := Lock(context.Background(), dir, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := (Resolver{Dir: dir}).Install(ctx, "controlplane"); err != nil {
		t.Fatalf("Install of a complete set waited on the lock: %v", err)
	}
}
