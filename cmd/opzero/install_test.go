package main

import (
	"context"
	"github.com/opzero/opzero/internal/testkit"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// outside is a user's machine as the CLI sees it: a fresh folder outside
// the checkout, its own user cache, no OPZERO_BIN_DIR.
type outside struct {
	t     *testing.T
	dir   string // working directory of the commands
	exe   string // the installed CLI
	env   []string
	cache string // XDG_CACHE_HOME
}

func (o *outside) run(dir string, extraEnv []string, args ...string) (string, error) {
	o.t.Helper()
	cmd := exec.Command(o.exe, args...)
	cmd.Dir, cmd.Env = dir, append(slices.Clone(o.env), extraEnv...)
	b, err := cmd.CombinedOutput()
	o.t.Logf("$ opzero %s\n%s", strings.Join(args, " "), b)
	return string(b), err
}

func (o *outside) must(args ...string) string {
	o.t.Helper()
	out, err := o.run(o.dir, nil, args...)
	if err != nil {
		o.t.Fatalf("opzero %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// installOutside go-installs the CLI from a new module that replaces
// github.com/opzero/opzero with the checkout, as a user would before the
// module is published, into a temporary GOBIN.
func installOutside(t *testing.T) *outside {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	o := &outside{t: t, dir: filepath.Join(work, "project"), cache: filepath.Join(work, "cache")}
	gobin := filepath.Join(work, "gobin")
	for _, d := range []string{o.dir, gobin, o.cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gomod := "module example.com/project\n\ngo 1.26\n\nrequire github.com/opzero/opzero v0.0.0\n\nreplace github.com/opzero/opzero => " + root + "\n"
	if err := os.WriteFile(filepath.Join(o.dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	// Go's own caches stay where they are (a new XDG_CACHE_HOME would move
	// GOCACHE and rebuild everything); opzero's cache is the new one.
	goenv := map[string]string{}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		b, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		goenv[k] = strings.TrimSpace(string(b))
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case pinned.Env, "KUBEBUILDER_ASSETS", "XDG_CACHE_HOME", "OPZERO_STATE_DIR", "KUBECONFIG", "GOFLAGS", "GOBIN", "GOCACHE", "GOMODCACHE", "GOPATH":
			continue
		}
		o.env = append(o.env, kv)
	}
	for k, v := range goenv {
		o.env = append(o.env, k+"="+v)
	}
	o.env = append(o.env, "XDG_CACHE_HOME="+o.cache)
	inst := exec.Command("go", "install", "github.com/opzero/opzero/cmd/opzero")
	inst.Dir, inst.Env = o.dir, append(slices.Clone(o.env), "GOBIN="+gobin, "GOFLAGS=-mod=mod")
	if b, err := inst.CombinedOutput(); err != nil {
		t.Fatalf("go install github.com/opzero/opzero/cmd/opzero in %s: %v\n%s", o.dir, err, b)
	}
	o.exe = filepath.Join(gobin, "opzero")
	return o
}

// seedFrom returns the folders that hold the binaries of the sets a bare
// `opzero install` installs (controlplane and knative, which `make bins
// knative-bins` put in the cache), for `opzero install --from`: the test
// links them instead of building. The sets installed only when named
// (otelcol, cluster, knative-cluster) are not looked for: a machine that
// never ran `make cluster-bins` has none of them.
func seedFrom(t *testing.T) []string {
	var names []string
	for _, n := range pinned.Names() {
		if s := pinned.SetOf(n); s == "controlplane" || s == "knative" {
			names = append(names, n)
		}
	}
	paths, err := pinned.Resolver{NoBuild: true}.Find(context.Background(), names...)
	if err != nil {
		t.Fatalf("%v (run `make bins knative-bins` first)", err)
	}
	var dirs []string
	for _, p := range paths {
		if d := filepath.Dir(p); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// TestOutsideTheCheckout is a user's first steps with an installed CLI, in
// a folder outside the checkout, with no OPZERO_BIN_DIR: install fills a
// fresh user cache (here by linking this checkout's binaries, which carry
// the same pins) and links the pinned kubectl beside the CLI (on PATH as
// the README has it), controlplane up --knative-crds / status / down find
// everything there, and opzero dev runs opzero's own wakeup-source images
// from the CLI in a module that has no dependency on opzero.
func TestOutsideTheCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the CLI and starts a control plane")
	}
	o := installOutside(t)
	out := o.must("install", "--from", strings.Join(seedFrom(t), ","))
	want := filepath.Join(o.cache, "opzero", pinned.Version())
	if !strings.Contains(out, "Ready in "+want) || strings.Contains(out, "building") {
		t.Fatalf("install printed:\n%s\nwant everything linked into %s, nothing built", out, want)
	}
	if got := strings.TrimSpace(o.must("install", "--print-dir")); got != want {
		t.Fatalf("install --print-dir = %q, want %q", got, want)
	}
	// kubectl as the docs type it: the pinned one, beside the installed CLI
	kubectl := exec.Command("/bin/sh", "-c", "command -v kubectl && kubectl version --client")
	kubectl.Env = append(slices.Clone(o.env), "PATH="+filepath.Dir(o.exe)+":/usr/bin:/bin")
	if b, err := kubectl.CombinedOutput(); err != nil || !strings.HasPrefix(string(b), filepath.Join(filepath.Dir(o.exe), "kubectl")) || !strings.Contains(string(b), "v1.34.3") {
		t.Fatalf("kubectl on PATH beside the installed opzero: %v\n%s\nwant the pinned v1.34.3", err, b)
	}

	plane := filepath.Join(t.TempDir(), "plane")
	out = o.must("controlplane", "up", "--dir", plane, "--port", "0", "--knative-crds")
	t.Cleanup(func() { _, _ = controlplane.Down(plane, false) })
	if !strings.Contains(out, "installed 8 CRDs") || strings.Contains(out, "building") {
		t.Fatalf("up printed:\n%s\nwant Knative's 8 CRDs installed and nothing built", out)
	}
	if st := o.must("controlplane", "status", "--dir", plane); !strings.Contains(st, "3/3 running") {
		t.Fatalf("status:\n%s", st)
	}
	p, err := controlplane.Load(plane)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Processes {
		if !strings.HasPrefix(pr.Path, want+"/") {
			t.Errorf("%s ran from %s, want it from the user cache %s", pr.Name, pr.Path, want)
		}
	}
	devOwnImages(t, o, filepath.Join(plane, "kubeconfig"))
	o.must("controlplane", "down", "--dir", plane)
	for _, pr := range p.Processes {
		if !gone(pr.PID) {
			t.Errorf("%s (pid %d) still runs after down", pr.Name, pr.PID)
		}
	}
	testenvOutside(t, o)
}

// testenvOutside runs a user's test package that uses testenv with
// Knative's CRDs: it finds everything in the user cache too.
func testenvOutside(t *testing.T, o *outside) {
	test := `package project

import (
	"context"
	"os"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{KnativeCRDs: true, NoControllerManager: true}))
}

func TestPlane(t *testing.T) {
	env := testenv.Get(t)
	crd := &apiextv1.CustomResourceDefinition{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "services.serving.knative.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	t.Logf("plane at %s with %s", env.Config.Host, crd.Name)
}
`
	if err := os.WriteFile(filepath.Join(o.dir, "plane_test.go"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", ".")
	cmd.Dir, cmd.Env = o.dir, append(slices.Clone(o.env), "GOFLAGS=-mod=mod")
	b, err := cmd.CombinedOutput()
	t.Logf("$ go test -count=1 -v . (in %s)\n%s", o.dir, b)
	if err != nil || !strings.Contains(string(b), "with services.serving.knative.dev") || strings.Contains(string(b), "opzero: building") {
		t.Fatalf("a user's testenv test outside the checkout: %v, want it to pass with nothing built", err)
	}
}

// devOwnImages runs opzero dev on two Deployments with opzero's own images
// (the CLI's wakeup-source command and the wakeup-source binary) from a
// module that does not require opzero: no go build of them, the CLI runs
// them itself.
func devOwnImages(t *testing.T, o *outside, kubeconfig string) {
	user := filepath.Join(t.TempDir(), "user")
	if err := os.MkdirAll(user, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/user\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var yaml strings.Builder
	for _, d := range []struct{ name, image, args string }{
		{"cli", "ko://github.com/opzero/opzero/cmd/opzero", "[wakeup-source, --operator=demo]"},
		{"binary", "ko://github.com/opzero/opzero/cmd/wakeup-source", "[--operator=demo]"},
	} {
		yaml.WriteString(`---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + d.name + `, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: ` + d.name + `}}
  template:
    metadata: {labels: {app: ` + d.name + `}}
    spec:
      containers:
      - {name: wakeup-source, image: "` + d.image + `", args: ` + d.args + `}
`)
	}
	file := filepath.Join(user, "wakeup.yaml")
	if err := os.WriteFile(file, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(t.TempDir(), "logs")
	cmd := exec.Command(o.exe, "dev", "-f", file, "--kubeconfig", kubeconfig, "--log-dir", logs, "--no-status", "--cache-dir", filepath.Join(o.cache, "ko"))
	cmd.Dir, cmd.Env = user, o.env
	buf := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("opzero dev still ran 30s after SIGINT")
		}
		t.Logf("$ opzero dev -f %s ...\n%s", file, buf.String())
	}()
	waitOutput(t, buf, "opzero dev: ready", done)
	for _, name := range []string{"cli", "binary"} {
		if !strings.Contains(buf.String(), "Deployment default/"+name+": ko://") {
			t.Errorf("Deployment %s did not start:\n%s", name, buf.String())
		}
		// The wakeup source's first log line, whichever way it was run.
		log := filepath.Join(logs, "deployment-default-"+name+".log")
		running := func() bool { b, _ := os.ReadFile(log); return strings.Contains(string(b), "wakeup source running") }
		if !testkit.Wait(30*time.Second, running) {
			b, _ := os.ReadFile(log)
			t.Fatalf("%s does not show the wakeup source running:\n%s", log, b)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(o.cache, "ko")); len(entries) > 0 {
		t.Errorf("opzero dev built %v for opzero's own images", entries)
	}
}

// TestWrongBinDirSaysWhatToDo: a folder given by OPZERO_BIN_DIR that lacks
// what up needs is named in the error, with the command that fills it, and
// no plane is left behind.
func TestWrongBinDirSaysWhatToDo(t *testing.T) {
	cache, err := pinned.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	onlyPlane := t.TempDir() // the control plane, but not Knative's CRDs
	for _, n := range []string{pinned.Etcd, pinned.KubeAPIServer, pinned.KubeControllerManager} {
		if err := os.Symlink(filepath.Join(cache, n), filepath.Join(onlyPlane, n)); err != nil {
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	for _, tc := range []struct {
		name, binDir string
		want         []string
	}{
		{"no binaries", empty, []string{"not found in OPZERO_BIN_DIR=" + empty, "opzero install --bin-dir " + empty}},
		{"no Knative CRDs", onlyPlane, []string{"Knative's CRDs are not in " + filepath.Join(onlyPlane, pinned.CRDFolder), "opzero install --bin-dir " + onlyPlane + " knative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(pinned.Env, tc.binDir)
			plane := filepath.Join(t.TempDir(), "plane")
			cmd := newRootCmd()
			cmd.SetArgs([]string{"controlplane", "up", "--dir", plane, "--port", "0", "--knative-crds"})
			cmd.SetOut(&syncBuffer{})
			err := cmd.Execute()
			if err == nil {
				_, _ = controlplane.Down(plane, false)
				t.Fatal("up succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := os.Stat(plane); !os.IsNotExist(err) {
				t.Errorf("up left %s behind", plane)
			}
		})
	}
}

// TestFlagHelpHasNoBackquotes: pflag turns a backquoted word in a flag's
// help into its type (`--kubeconfig opzero controlplane up`), so no help
// text quotes with backquotes.
func TestFlagHelpHasNoBackquotes(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("opzero %s --%s: help %q renders as type %q", c.CommandPath(), f.Name, f.Usage, name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}
