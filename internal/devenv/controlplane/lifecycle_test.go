package controlplane_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// TestUpDownLifecycle starts a second plane next to the package's one and
// walks it through the states a user meets: running, refused twice, kept,
// stale, removed.
func TestUpDownLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second control plane; skipped under -short")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "plane")
	p, err := controlplane.Up(ctx, controlplane.Options{Dir: dir, DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(false) })
	if len(p.Processes) != 3 {
		t.Fatalf("started %d processes, want etcd, kube-apiserver, kube-controller-manager", len(p.Processes))
	}
	for _, s := range p.Status() {
		if !s.Running || s.RSSBytes == 0 {
			t.Errorf("%s: running=%v rss=%d, want running with memory", s.Name, s.Running, s.RSSBytes)
		}
	}
	if _, err := os.Stat(p.Kubeconfig); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}

	_, err = controlplane.Up(ctx, controlplane.Options{Dir: dir, DieWithParent: true})
	if err == nil || !strings.Contains(err.Error(), "already runs") || !strings.Contains(err.Error(), "controlplane down") {
		t.Fatalf("second Up on a running folder: %v, want 'already runs ... controlplane down'", err)
	}

	if err := p.Stop(true); err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Processes {
		if !gone(pr.PID) {
			t.Errorf("%s (pid %d) still runs after Stop", pr.Name, pr.PID)
		}
	}
	_, err = controlplane.Up(ctx, controlplane.Options{Dir: dir, DieWithParent: true})
	if err == nil || !strings.Contains(err.Error(), "no longer runs") {
		t.Fatalf("Up on a stale folder: %v, want 'no longer runs'", err)
	}
	if _, err := controlplane.Down(dir, false); err != nil {
		t.Fatalf("Down of a stopped plane: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("state folder after Down: %v, want removed", err)
	}
	if _, err := controlplane.Down(dir, false); err == nil || !strings.Contains(err.Error(), "nothing to stop") {
		t.Fatalf("Down of nothing: %v, want 'nothing to stop'", err)
	}
}

func TestUpRefusesBadInputAndChangesNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	cases := []struct {
		name string
		opts controlplane.Options
		want []string
	}{
		{"port in use", controlplane.Options{APIServerPort: busy}, []string{"in use", "kube-apiserver"}},
		{"missing binaries", controlplane.Options{BinDir: t.TempDir()}, []string{"not found", "opzero install --bin-dir"}},
		{"no state folder", controlplane.Options{Dir: "-"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "plane")
			if tc.opts.Dir == "-" {
				dir = ""
			}
			tc.opts.Dir = dir
			_, err := controlplane.Up(context.Background(), tc.opts)
			if err == nil {
				t.Fatal("Up succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if dir != "" {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("Up left a state folder behind: %v", err)
				}
			}
		})
	}
}
