// Command devfigures measures, on `opzero dev`'s imitation of Knative, the
// figures make e2e-knative measures on real Knative with the same steps:
// the ConfigWatcher example's manifests (opzero manifests --idle 6s), at
// zero instances a ConfigMap edit until the ConfigWatcher's status records
// it (event at zero -> reconciled), then the time until opzero dev reports
// the Service scaled to zero; n times (default 10).
//
//	go run ./hack/devfigures [-n 10]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devsession"
)

const ns, svc = "figures", "configwatcher"

var gvrCW = schema.GroupVersionResource{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers"}

func main() {
	n := flag.Int("n", 10, "cold starts to measure")
	flag.Parse()
	if err := run(context.Background(), *n); err != nil {
		fmt.Fprintln(os.Stderr, "devfigures:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "opzero-devfigures-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true})
	if err != nil {
		return err
	}
	defer plane.Stop(false)
	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", plane.Kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	opzero := filepath.Join(dir, "opzero")
	build := exec.CommandContext(ctx, "go", "build", "-o", opzero, "./cmd/opzero")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building opzero: %w: %s", err, out)
	}
	if err := kubectl("create", "namespace", ns); err != nil {
		return err
	}
	if err := kubectl("apply", "-n", ns, "-f", filepath.Join(root, "examples/configwatcher/config/samples/webapp.yaml")); err != nil {
		return err
	}
	gen := exec.CommandContext(ctx, opzero, "manifests", "--operator", "./examples/configwatcher", "--namespace", ns, "--idle", "6s", "-o", filepath.Join(dir, "manifests"))
	gen.Dir = root
	if out, err := gen.CombinedOutput(); err != nil {
		return fmt.Errorf("opzero manifests: %w: %s", err, out)
	}
	p, err := devsession.Start(opzero, ns+"/"+svc, []string{"dev", "-f", filepath.Join(dir, "manifests"), "--kubeconfig", plane.Kubeconfig,
		"--log-dir", filepath.Join(dir, "logs"), "--build-dir", root, "--events=json", "--no-status"})
	if err != nil {
		return err
	}
	defer p.Stop()
	if _, err := p.Next(ctx, 0, 3*time.Minute, "ready", func(e dev.Event) bool { return e.Event == dev.EventReady }); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(plane.Config)
	if err != nil {
		return err
	}
	if err := kubectl("apply", "-n", ns, "-f", filepath.Join(root, "examples/configwatcher/config/samples/configwatcher.yaml")); err != nil {
		return err
	}
	if err := waitStatus(ctx, dyn, func(v string) bool { return v != "" }); err != nil {
		return err
	}
	var cold, zero []time.Duration
	for i := range n {
		if err := p.WaitZero(ctx); err != nil {
			return err
		}
		mark, t0 := p.Len(), time.Now()
		cm, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns).Patch(ctx, "webapp-config",
			types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"message":"cold start %d"}}`, i)), metav1.PatchOptions{})
		if err != nil {
			return err
		}
		if err := waitStatus(ctx, dyn, func(v string) bool { return v == cm.GetResourceVersion() }); err != nil {
			return err
		}
		cold = append(cold, time.Since(t0))
		t1 := time.Now()
		if _, err := p.Next(ctx, mark, 2*time.Minute, "scaled to zero", func(e dev.Event) bool {
			return e.Event == dev.EventScaledToZero && e.Service == ns+"/"+svc
		}); err != nil {
			return err
		}
		zero = append(zero, time.Since(t1))
	}
	fmt.Printf("FIGURE opzero dev: event at zero instances -> reconciled: %s\n", summary(cold))
	fmt.Printf("FIGURE opzero dev: reconciled -> scaled to zero (--idle 6s): %s\n", summary(zero))
	return nil
}

// waitStatus polls the ConfigWatcher's status.configMapVersion every 10 ms.
func waitStatus(ctx context.Context, dyn dynamic.Interface, ok func(string) bool) error {
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(gvrCW).Namespace(ns).Get(ctx, "webapp-config-watcher", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, _, _ := unstructured.NestedString(o.Object, "status", "configMapVersion")
		return ok(v), nil
	})
}

func summary(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var parts []string
	for _, d := range ds {
		parts = append(parts, d.Round(time.Millisecond).String())
	}
	return fmt.Sprintf("median %s, max %s (n=%d: %s)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s), strings.Join(parts, " "))
}
