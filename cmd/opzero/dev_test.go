package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/testkit"
)

// TestDevRefusesBadManifests: manifests that do not parse are reported
// before any control plane is looked for or started.
func TestDevRefusesBadManifests(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"dev"}, {"dev", "-f", bad}, {"dev", "-f", "-"}} {
		var out bytes.Buffer
		cmd := newRootCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetIn(strings.NewReader("just text\n"))
		cmd.SetArgs(args)
		err := cmd.Execute()
		if err == nil {
			t.Fatalf("opzero %v: no error", args)
		}
		t.Logf("opzero %s: %v", strings.Join(args, " "), err)
		if strings.Contains(out.String(), "control plane") {
			t.Errorf("opzero %v looked for a control plane:\n%s", args, out.String())
		}
	}
}

// TestDevCtrlC is the user's path: opzero dev on the hand-written manifests
// against a running plane, a ConfigMap change starts the operator, and
// Ctrl-C (SIGINT) while it runs stops every process opzero dev started.
func TestDevCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx := context.Background()
	dir := t.TempDir()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })
	root, _ := controlplane.RepoRoot()
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, filepath.Join(root, "examples/configwatcher/config/crd")); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "opzero")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, "dev", "-f", filepath.Join(root, "internal/devenv/dev/testdata/configwatcher.yaml"), "--kubeconfig", plane.Kubeconfig,
		"--build-dir", root, "--cache-dir", filepath.Join(dir, "cache"), "--log-dir", filepath.Join(dir, "logs"), "--idle", "1m")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitOutput(t, out, "opzero dev: ready", done)
	bin, _ := controlplane.BinDir()
	patch := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", plane.Kubeconfig, "create", "configmap", "poke", "--from-literal=a=b")
	if b, err := patch.CombinedOutput(); err != nil {
		t.Fatalf("kubectl: %v\n%s", err, b)
	}
	waitOutput(t, out, "instance ready", done)
	children := descendants(cmd.Process.Pid)
	if len(children) < 3 { // the ApiServerSource adapter, mtping, the operator
		t.Fatalf("children of opzero dev: %v, want the adapters and the operator\n%s", children, out.String())
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("opzero dev exit after SIGINT: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("opzero dev still runs 30s after SIGINT\n%s", out.String())
	}
	for _, pid := range children {
		if !gone(pid) {
			t.Errorf("pid %d (%s) still runs after opzero dev exited", pid, cmdline(pid))
		}
	}
	if !strings.Contains(out.String(), "configwatcher: 0 instances,") || strings.Contains(out.String(), " 0 cold starts") {
		t.Errorf("final status line missing, or no cold start in it:\n%s", out.String())
	}
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

func waitOutput(t *testing.T, out *syncBuffer, what string, done <-chan error) {
	t.Helper()
	var exited bool
	var err error
	printed := testkit.Wait(2*time.Minute, func() bool {
		if strings.Contains(out.String(), what) {
			return true
		}
		select {
		case err = <-done:
			exited = true
			return true
		default:
			return false
		}
	})
	switch {
	case exited:
		t.Fatalf("opzero dev exited (%v) before printing %q:\n%s", err, what, out.String())
	case !printed:
		t.Fatalf("opzero dev did not print %q:\n%s", what, out.String())
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid, self int
		fmt.Sscanf(string(b[:bytes.IndexByte(b, ' ')]), "%d", &self)
		fmt.Sscanf(string(b[i+2:]), "%s %d", &state, &ppid)
		parent[self] = ppid
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}
