package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
)

func run(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("opzero %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestControlPlaneUpKnativeApplyDown is the user's path: up with Knative's
// CRDs, kubectl apply of a Knative Service and an ApiServerSource, status,
// down; no process is left behind.
func TestControlPlaneUpKnativeApplyDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dir := filepath.Join(t.TempDir(), "plane")
	out := run(t, "controlplane", "up", "--dir", dir, "--port", "0", "--knative-crds")
	t.Cleanup(func() { _, _ = controlplane.Down(dir, false) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if !strings.Contains(out, "export KUBECONFIG="+kubeconfig+"\n") || !strings.Contains(out, "installed 8 CRDs") {
		t.Fatalf("up printed:\n%s\nwant the CRD count and an export KUBECONFIG line", out)
	}
	p, err := controlplane.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := controlplane.BinDir()
	apply := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig, "apply", "-f", "testdata/knative-objects.yaml")
	if b, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, b)
	} else if !strings.Contains(string(b), "service.serving.knative.dev/hello created") || !strings.Contains(string(b), "apiserversource.sources.knative.dev/cms created") {
		t.Fatalf("kubectl apply printed:\n%s", b)
	}
	if st := run(t, "controlplane", "status", "--dir", dir); !strings.Contains(st, "3/3 running") {
		t.Fatalf("status:\n%s", st)
	}
	run(t, "controlplane", "down", "--dir", dir)
	for _, pr := range p.Processes {
		if !gone(pr.PID) {
			t.Errorf("%s (pid %d) still runs after down", pr.Name, pr.PID)
		}
	}
	if st := run(t, "controlplane", "status", "--dir", dir); !strings.Contains(st, "No control plane") {
		t.Fatalf("status after down:\n%s", st)
	}
}

// gone reports whether pid has exited. Here up ran in the test process, so
// the components are its children: an exited one may be a zombie for a
// moment until it is reaped (from a shell, init reaps it).
func gone(pid int) bool {
	return testkit.Wait(2*time.Second, func() bool { return proc.Dead(pid) })
}
