package controlplane_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// TestKillAndRestart: a kube-apiserver killed with SIGKILL is restarted
// with its arguments (same port, same etcd): the kubeconfig still works
// and what was written before is there; Restart refuses a running one.
// The same for etcd: once Restart returns, the API server serves again
// (it waited for its /readyz), with what was written before.
func TestKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second control plane")
	}
	ctx := context.Background()
	p, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(t.TempDir(), "plane"), DieWithParent: true, NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(false) })
	cs := kubernetes.NewForConfigOrDie(p.Config)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx, "kube-apiserver", true); err == nil || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("Restart of a running kube-apiserver: %v, want 'still runs'", err)
	}
	old := p.Status()[1].PID
	if err := p.Kill("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server answered after Kill")
	}
	if err := p.Restart(ctx, "kube-apiserver", true); err != nil {
		t.Fatal(err)
	}
	if s := p.Status()[1]; !s.Running || s.PID == old {
		t.Fatalf("after Restart: %+v, want a new running pid (old %d)", s, old)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading back after the restart: %v", err)
	}

	if err := p.Kill("etcd"); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx, "etcd", true); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading back after the etcd restart: %v", err)
	}
}
