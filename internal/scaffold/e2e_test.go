package scaffold_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"github.com/opzero/opzero/internal/testkit"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// TestStartAProjectOutsideTheCheckout is a new user's path, in a temporary
// folder outside the checkout: install the CLI, opzero init, opzero create
// api, build, the project's make test, then make dev (opzero manifests +
// opzero dev) with a create, an update and a delete of the kind, and the
// operator scaling to zero.
func TestStartAProjectOutsideTheCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the CLI, builds a project and starts control planes")
	}
	ctrllog.SetLogger(logr.Discard())
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if strings.HasPrefix(tmp, root+string(filepath.Separator)) {
		t.Fatalf("temporary folder %s is inside the checkout %s", tmp, root)
	}
	ctx := context.Background()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(tmp, "plane"), DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })

	gobin := filepath.Join(tmp, "bin")
	// Nothing points at the checkout: the pinned binaries and Knative's CRDs
	// come from opzero's user cache, as for any user.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPZERO_BIN_DIR=") && !strings.HasPrefix(kv, "KUBEBUILDER_ASSETS=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		if name == "opzero" {
			name = filepath.Join(gobin, name) // exec.Command looks in this process's PATH
		}
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}

	// Install the CLI as a user would, from a module that requires opzero
	// (replaced by the checkout: it is not published).
	install := filepath.Join(tmp, "install")
	writeFile(t, filepath.Join(install, "go.mod"), fmt.Sprintf("module install\n\ngo 1.26.0\n\ntool github.com/opzero/opzero/cmd/opzero\n\n"+
		"require github.com/opzero/opzero v0.0.0-00010101000000-000000000000\n\nreplace github.com/opzero/opzero => %s\n", root))
	run(install, "go", "mod", "tidy")
	run(install, "env", "GOBIN="+gobin, "go", "install", "github.com/opzero/opzero/cmd/opzero")

	project := filepath.Join(tmp, "memcached-operator")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	out := run(project, "opzero", "init", "--domain", "example.com", "--repo", "example.com/memcached-operator", "--owner", "The Memcached Authors")
	if !strings.Contains(out, "replace github.com/opzero/opzero => "+root) {
		t.Errorf("opzero init did not offer the checkout it was installed from:\n%s", out)
	}
	run(project, "opzero", "create", "api", "--group", "cache", "--version", "v1alpha1", "--kind", "Memcached")
	run(project, "go", "build", "./...")
	run(project, "go", "vet", "./...")
	if out := run(project, "gofmt", "-l", "."); out != "" {
		t.Errorf("generated files gofmt would change: %s", out)
	}
	deepcopy := filepath.Join(project, "api/v1alpha1/zz_generated.deepcopy.go")
	before := fileHash(t, deepcopy)

	out = run(project, "make", "test")
	if !regexp.MustCompile(`(?m)^ok\s+example.com/memcached-operator/internal/controller\s`).MatchString(out) {
		t.Fatalf("make test did not run the controller test:\n%s", out)
	}
	if fileHash(t, deepcopy) != before {
		t.Errorf("make generate (go tool controller-gen) rewrote the DeepCopy methods create api generated differently")
	}

	c, err := client.New(plane.Config, client.Options{Scheme: runtime.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	dev := startSession(t, project, env, "opzero dev: ready", "make", "dev", "MANIFESTS_FLAGS=--idle=2s",
		"DEV_FLAGS=--kubeconfig="+plane.Kubeconfig+" --log-dir="+filepath.Join(project, "logs")+" --cache-dir="+filepath.Join(tmp, "cache"))
	exerciseServerless(t, c, dev)
	dev.stop(t)
	if !strings.Contains(dev.out.String(), "opzero dev: stopping") {
		t.Errorf("opzero dev did not stop on SIGINT:\n%s", dev.out.String())
	}

	// The same binary, classic, as make run starts it.
	classic := startSession(t, project, append(env, "KUBECONFIG="+plane.Kubeconfig), `"msg":"starting","mode":"classic"`, "make", "run")
	m := newMemcached("classic")
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the Memcached Ready with generation 1 observed, classic", reconciled(c, m, 1))
	classic.stop(t)

	// Nothing the sessions started outlives them: no process but the
	// control plane's runs from or in the temporary folder.
	for _, p := range processesUnder(tmp) {
		if !strings.Contains(p, filepath.Join(tmp, "plane")) {
			t.Errorf("still running after Ctrl-C: %s", p)
		}
	}
}

// processesUnder lists the processes that run in dir or whose command line
// mentions it, from /proc.
func processesUnder(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || len(b) == 0 {
			continue // gone, or a zombie
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
		if strings.Contains(cmd, dir) || strings.HasPrefix(cwd, dir) {
			out = append(out, fmt.Sprintf("%s (in %s): %s", p, cwd, cmd))
		}
	}
	return out
}

// session is a running `make dev` or `make run` and its output.
type session struct {
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan error
	stopped bool // only the test's goroutine touches it
}

// startSession runs a make target in its own process group and waits until
// its output says ready.
func startSession(t *testing.T, project string, env []string, ready string, args ...string) *session {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = project, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches make and its children, as from a terminal
	d := &session{cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("%s:\n%s", strings.Join(args, " "), d.out.String())
			logs, _ := filepath.Glob(filepath.Join(project, "logs", "service-*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, tail(b))
			}
		}
	})
	d.wait(t, ready, func(s string) bool { return strings.Contains(s, ready) })
	return d
}

// stop sends SIGINT to the session's process group, as Ctrl-C does, and
// waits for it to end.
func (d *session) stop(t *testing.T) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(time.Minute):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("%v still ran a minute after SIGINT", d.cmd.Args)
	}
}

var statusRe = regexp.MustCompile(`memcached: (\d+) instances?, \d+ events \(\d+ failed\), (\d+) reconciles(?: \(\d+ failed\))?, (\d+) cold starts`)

// status returns the last status line's instances, reconciles and cold starts.
func (d *session) status() (instances, reconciles, coldStarts int, ok bool) {
	m := statusRe.FindAllStringSubmatch(d.out.String(), -1)
	if len(m) == 0 {
		return 0, 0, 0, false
	}
	last := m[len(m)-1]
	instances, _ = strconv.Atoi(last[1])
	reconciles, _ = strconv.Atoi(last[2])
	coldStarts, _ = strconv.Atoi(last[3])
	return instances, reconciles, coldStarts, true
}

func (d *session) wait(t *testing.T, what string, cond func(out string) bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond(d.out.String()) {
		select {
		case err := <-d.done:
			t.Fatalf("make dev exited (%v) before %s:\n%s", err, what, d.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 3m", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newMemcached(name string) *unstructured.Unstructured {
	m := &unstructured.Unstructured{}
	m.SetAPIVersion("cache.example.com/v1alpha1")
	m.SetKind("Memcached")
	m.SetNamespace("default")
	m.SetName(name)
	_ = unstructured.SetNestedField(m.Object, "bar", "spec", "foo")
	return m
}

// reconciled is true once m (read again into m) has generation gen, Ready
// True for it, and status.observedGeneration gen.
func reconciled(c client.Client, m *unstructured.Unstructured, gen int64) func(context.Context) (bool, error) {
	key := client.ObjectKeyFromObject(m)
	return func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, m); err != nil {
			return false, err
		}
		observed, _, _ := unstructured.NestedInt64(m.Object, "status", "observedGeneration")
		conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
		for _, x := range conds {
			cond, _ := x.(map[string]any)
			if cond["type"] == "Ready" && cond["status"] == "True" && cond["observedGeneration"] == gen {
				return observed == gen && m.GetGeneration() == gen, nil
			}
		}
		return false, nil
	}
}

// exerciseServerless creates, updates and deletes a Memcached through the
// serverless operator opzero dev runs, then waits for it to scale to zero.
func exerciseServerless(t *testing.T, c client.Client, dev *session) {
	t.Helper()
	ctx := context.Background()
	m := newMemcached("sample")
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Minute, "the created Memcached Ready with generation 1 observed", reconciled(c, m, 1))

	_ = unstructured.SetNestedField(m.Object, "baz", "spec", "foo")
	if err := c.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the updated Memcached Ready with generation 2 observed", reconciled(c, m, 2))

	dev.wait(t, "a status line", func(string) bool { _, _, _, ok := dev.status(); return ok })
	_, reconcilesBefore, _, _ := dev.status()
	if err := c.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(m)
	testkit.Eventually(t, time.Minute, "the Memcached gone", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, m)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	dev.wait(t, "the deletion's reconcile", func(string) bool {
		_, n, _, _ := dev.status()
		return n > reconcilesBefore
	})
	dev.wait(t, "scale to zero", func(string) bool {
		n, _, cold, _ := dev.status()
		return n == 0 && cold >= 1
	})
	lines := statusRe.FindAllString(dev.out.String(), -1)
	t.Logf("opzero dev's last status: %s", lines[len(lines)-1])
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return append([]byte("..."), b[len(b)-4000:]...)
	}
	return b
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReadmeNewProject runs the README's commands for a new project
// exactly as written, as a new user would in a folder outside the
// checkout: install the CLI and opzero's programs, opzero init, opzero
// create api, make test, and make dev until it is ready, then Ctrl-C.
func TestReadmeNewProject(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the CLI, builds a project, runs its tests and opzero dev")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if strings.HasPrefix(dir, root+string(filepath.Separator)) {
		t.Fatalf("temporary folder %s is inside the checkout %s", dir, root)
	}
	env := testkit.ReadmeEnv(t, root)
	var out string
	for _, block := range []string{"install", "new"} {
		lines, err := testkit.BookBlock(root, block)
		if err != nil {
			t.Fatal(err)
		}
		out = testkit.RunReadme(t, dir, env, "opzero dev: ready", lines)
		t.Logf("README %s:\n%s", block, testkit.Tail([]byte(out), 40))
	}
	if !regexp.MustCompile(`(?m)^ok\s+example.com/memcached-operator/internal/controller\s`).MatchString(out) {
		t.Errorf("make test did not run the controller test:\n%s", out)
	}
	if !strings.Contains(out, "opzero dev: stopping") {
		t.Errorf("make dev did not stop on Ctrl-C:\n%s", out)
	}
}
