// Package testenv is the test harness for opzero and its users: one real
// control plane (etcd, kube-apiserver, kube-controller-manager) per test
// package, started from TestMain, CRDs installed from folders, a rest.Config
// and a client, and a fresh namespace per test.
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"config/crd"}}))
//	}
//
//	func TestSomething(t *testing.T) {
//		env := testenv.Get(t)
//		ns := env.Namespace(t)
//		...
//	}
//
// # Guarantees
//
//   - The control plane's processes die with the test binary, even when a
//     test panics or the binary is killed (the kernel's parent-death signal).
//   - Main stops the plane and removes its folder after the tests; folders
//     left by test binaries that died are removed by the next Main.
//   - Every port is picked free, so test packages run in parallel.
//
// # Binaries
//
// The control plane's binaries (etcd, kube-apiserver, kube-controller-manager)
// are opzero's pinned builds of Kubernetes v1.34.3, found in this order:
//
//  1. $OPZERO_BIN_DIR, if set (it must hold them all);
//  2. $KUBEBUILDER_ASSETS, envtest's folder, for etcd and kube-apiserver;
//  3. the user cache, $XDG_CACHE_HOME/opzero/<pins> (~/.cache/opzero/...).
//
// What the cache lacks is built there from the pinned Go modules before the
// tests start (about 9 minutes on 2 cores the first time, with a progress
// line every 10 s on standard error; later runs find it). Run `opzero
// install` once to build ahead of time, e.g. in CI before `go test`; `opzero
// install --print-dir` prints the folder. Knative's CRDs (KnativeCRDs) come
// from the same place. No opzero checkout is needed.
//
// # -short
//
// Under go test -short, Main starts no control plane and Get skips the test
// calling it: make unit runs every test that needs none.
//
// # Caveats
//
// There is no scheduler and no kubelet: Pods stay Pending.
package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// Options configures Main.
type Options struct {
	// CRDDirs are CRD files or folders installed before the tests run.
	CRDDirs []string
	// KnativeCRDs also installs Knative's Service, ApiServerSource,
	// PingSource, Broker and Trigger CRDs.
	KnativeCRDs bool
	// Scheme for Env.Client; nil means client-go's scheme plus
	// apiextensions/v1. Register your own types before Main.
	Scheme *runtime.Scheme
	// NoControllerManager skips kube-controller-manager (faster start; no
	// garbage collection, ReplicaSets or namespace deletion).
	NoControllerManager bool
}

// Env is the running control plane of a test package.
type Env struct {
	Config     *rest.Config
	Client     client.Client
	Scheme     *runtime.Scheme
	Kubeconfig string // path of an admin kubeconfig, for child processes
	// Dir is the control plane's folder: its logs, certificates and the
	// service-account signing key (sa.key).
	Dir string
	// EtcdURL is etcd's client URL (plain HTTP on loopback): tests that
	// need what only etcd does, such as a compaction, talk to it directly.
	EtcdURL string

	plane *controlplane.Plane
}

// RestartAPIServer kills kube-apiserver (SIGKILL, as a crash would) and
// starts it again, returning once it serves: its watch cache starts anew,
// so watches from before the restart that etcd has compacted get 410 Gone.
// Fault tests of clients that must resume use it.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	if err := e.plane.Kill("kube-apiserver"); err != nil {
		return err
	}
	return e.plane.Restart(ctx, "kube-apiserver", true)
}

var current *Env

const dirPrefix = "opzero-testenv-"

// Main starts the control plane, runs the tests and stops it, returning the
// exit code for os.Exit. A control plane that cannot start fails the whole
// package with the reason. Under -short it starts nothing and only runs the
// tests (Get skips those that need the plane).
func Main(m *testing.M, opts Options) int {
	if !flag.Parsed() {
		flag.Parse() // testing.Short reads the flags; m.Run would parse them later
	}
	if testing.Short() {
		return m.Run()
	}
	removeStaleDirs()
	env, stop, err := start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	current = env
	defer stop()
	return m.Run()
}

func start(opts Options) (*Env, func(), error) {
	// A first run builds the binaries (minutes): before the start's timeout.
	names := []string{pinned.Etcd, pinned.KubeAPIServer}
	if !opts.NoControllerManager {
		names = append(names, pinned.KubeControllerManager)
	}
	if _, err := (pinned.Resolver{Progress: os.Stderr}).Find(context.Background(), names...); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, nil, err
	}
	plane, err := controlplane.Up(ctx, controlplane.Options{
		Dir: filepath.Join(dir, "plane"), DieWithParent: true, NoControllerManager: opts.NoControllerManager,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() { _ = plane.Stop(false); os.RemoveAll(dir) }
	paths := opts.CRDDirs
	if opts.KnativeCRDs {
		kn, err := (pinned.Resolver{Progress: os.Stderr}).CRDs(ctx)
		if err != nil {
			stop()
			return nil, nil, err
		}
		paths = append(paths, kn...)
	}
	if len(paths) > 0 {
		if _, err := controlplane.InstallCRDs(ctx, plane.Config, paths...); err != nil {
			stop()
			return nil, nil, err
		}
	}
	env, err := newEnv(plane, opts.Scheme)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return env, stop, nil
}

func newEnv(plane *controlplane.Plane, scheme *runtime.Scheme) (*Env, error) {
	if scheme == nil {
		scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return nil, err
		}
		if err := apiextv1.AddToScheme(scheme); err != nil {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(plane.Config)
	cfg.QPS, cfg.Burst = 1000, 2000 // tests are the only clients
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, Kubeconfig: plane.Kubeconfig, Dir: plane.Dir, EtcdURL: plane.EtcdURL, plane: plane}, nil
}

// Get returns the package's Env; it fails the test if TestMain did not call
// Main. Under -short it skips the test: there is no control plane.
func Get(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: needs a control plane (kube-apiserver, etcd); skipped under -short")
	}
	if current == nil {
		t.Fatal("testenv: no control plane: call os.Exit(testenv.Main(m, testenv.Options{})) from TestMain")
	}
	return current
}

// Namespace creates a fresh namespace for t and deletes it when t ends,
// whether it passed, failed or panicked.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("testenv: creating a namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// removeStaleDirs removes folders of test binaries that died without
// cleaning up (their PID, in the folder's name, no longer runs).
func removeStaleDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, m := range matches {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(m), dirPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(m)
		}
	}
}
