package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/examples/configwatcher/controller"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/plan"
)

// TestPlanCommand runs `opzero plan` on the ConfigWatcher example's
// binary against the test's API server: a new ConfigWatcher's first
// status would be written (exit 2, printed per object, json and diff);
// once the example has converged it for real, nothing would change
// (exit 0). Nothing is written by either plan.
func TestPlanCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx := context.Background()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(t.TempDir(), "plane"), DieWithParent: true, NoControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, "../../examples/configwatcher/config/crd"); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	c, err := client.New(plane.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := "plan"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "configwatcher")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/configwatcher").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv("KUBECONFIG", plane.Kubeconfig)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns}, Data: map[string]string{"k": "v"}}
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "app-config", PodSelector: map[string]string{"app": "web"}}}
	for _, o := range []client.Object{cm, cw} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	opzeroPlan := func(args ...string) (string, int) {
		t.Helper()
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"plan", bin, "-n", ns}, args...))
		err := cmd.ExecuteContext(ctx)
		var code exitCode
		switch {
		case err == nil:
			return out.String(), 0
		case errors.As(err, &code):
			return out.String(), int(code)
		}
		t.Fatalf("opzero plan %v: %v\n%s", args, err, out.String())
		return "", 1
	}

	text, code := opzeroPlan()
	if code != 2 || !strings.Contains(text, "ConfigWatcher "+ns+"/web (configwatcher, round 1)") ||
		!strings.Contains(text, "update ConfigWatcher "+ns+"/web (status)") || !strings.Contains(text, `+ status.configMapVersion: "`) {
		t.Errorf("first plan: exit %d, want 2 with web's status write:\n%s", code, text)
	}
	js, code := opzeroPlan("-o", "json")
	rep, err := plan.Read(strings.NewReader(js))
	if err != nil || code != 2 || len(rep.Objects) != 1 || rep.Objects[0].Name != "web" || rep.Rounds != 1 {
		// one round: the status write observes the generation, which
		// generation-aware skipping would not reconcile again
		t.Errorf("-o json: exit %d, %v, want one planned object web, one round:\n%s", code, err, js)
	}
	diff, code := opzeroPlan("ConfigWatcher/web", "-o", "diff")
	if code != 2 || !strings.Contains(diff, "--- ConfigWatcher "+ns+"/web (status)\n+++ ConfigWatcher "+ns+"/web (status)") {
		t.Errorf("-o diff: exit %d, want web's status hunk:\n%s", code, diff)
	}
	if out, code := opzeroPlan("nosuch"); code != 1 || !strings.Contains(out, `no ConfigWatcher named "nosuch"`) {
		t.Errorf("a name nothing has: exit %d, want 1 and the name said (a typo is no plan that changes nothing):\n%s", code, out)
	}
	got := &v1.ConfigWatcher{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cw), got); err != nil || got.ResourceVersion != cw.ResourceVersion {
		t.Fatalf("the plans wrote the ConfigWatcher: resourceVersion %s -> %s (%v)", cw.ResourceVersion, got.ResourceVersion, err)
	}

	r := &controller.ConfigWatcherReconciler{Client: c}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cw)}); err != nil {
		t.Fatal(err)
	}
	if text, code := opzeroPlan(); code != 0 || !strings.Contains(text, "Plan: 0 reconcile(s) would change something, 1 would change nothing, 0 failed") {
		t.Errorf("after converging: exit %d, want 0:\n%s", code, text)
	}
}
