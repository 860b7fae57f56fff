// Command plan measures `opzero plan` (issue 51) on a local control plane
// of its own, and prints ratios and counts, not absolute times:
//
//		go run ./bench/plan                      # 2000 objects, the 200-object upgrade
//		go run ./bench/plan -objects 500 -upgrade 50
//
//	 1. writes reaching etcd during a plan of N ConfigWatchers never
//	    reconciled (each would write its status): the etcd keys whose
//	    mod_revision moved during the plan, the API server's own Leases
//	    left out and listed apart (goal 0);
//	 2. the plan's time over the time the same operator, serverless, takes
//	    to converge the same N for real in the same run (a full sweep,
//	    {"sweep":"all"}, answered once every object is reconciled), both
//	    in this process with the same reconciler and concurrency (goal
//	    <= 1.0x);
//	 3. for one upgrade of M ConfigWatchers (version 2 writes another value
//	    of the annotation version 1 put on each selected pod), the objects
//	    whose planned field changes differ from what the real reconcile of
//	    version 2 then wrote, diffing each object before and after (goal 0).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

func main() {
	objects := flag.Int("objects", 2000, "ConfigWatchers planned and converged (figures 1 and 2)")
	upgrade := flag.Int("upgrade", 200, "ConfigWatchers of the upgrade (figure 3)")
	runs := flag.Int("runs", 3, "runs of figure 2, each on fresh objects; the median ratio is printed")
	flag.Parse()
	if err := run(*objects, *upgrade, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "bench/plan:", err)
		os.Exit(1)
	}
}

type bench struct {
	cfg     *rest.Config
	c       client.Client
	scheme  *runtime.Scheme
	etcdURL string
}

func run(objects, upgrade, runs int) error {
	ctx := context.Background()
	if _, err := (pinned.Resolver{Progress: os.Stderr}).Find(ctx, pinned.Etcd, pinned.KubeAPIServer); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "opzero-bench-plan-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	plane, err := controlplane.Up(upCtx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true, NoControllerManager: true})
	if err != nil {
		return err
	}
	defer func() { _ = plane.Stop(false) }()
	if _, err := controlplane.InstallCRDs(upCtx, plane.Config, "examples/configwatcher/config/crd"); err != nil {
		return fmt.Errorf("%w (run it from the repository's root)", err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	cfg := rest.CopyConfig(plane.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, c: c, scheme: scheme, etcdURL: plane.EtcdURL}

	fmt.Printf("opzero plan, %d ConfigWatchers (figures 1, 2) and an upgrade of %d (figure 3), on a local kube-apiserver and etcd\n\n", objects, upgrade)
	var ratios []float64
	for i := range runs {
		ns := fmt.Sprintf("plan-%d", i)
		if err := b.watchers(ctx, ns, objects); err != nil {
			return err
		}
		writes, self, planned, tPlan, err := b.planAll(ctx, ns)
		if err != nil {
			return err
		}
		rev, err := b.etcdRevision(ctx)
		if err != nil {
			return err
		}
		tReal, err := b.converge(ctx, ns, objects)
		if err != nil {
			return err
		}
		realWrites, err := b.etcdWritten(ctx, rev) // the measure is not blind: the real converge's writes show
		if err != nil {
			return err
		}
		ratio := tPlan.Seconds() / tReal.Seconds()
		ratios = append(ratios, ratio)
		fmt.Printf("run %d: %d objects planned (%d would change); writes reaching etcd during the plan: %d (the API server's own Leases, left out: %d; during the real converge after it: %d keys); plan / real converge: %.2fx\n",
			i+1, planned.objects, planned.changed, len(writes), len(self), len(realWrites), ratio)
		for _, k := range writes {
			fmt.Printf("  written during the plan: %s\n", k)
		}
	}
	fmt.Printf("\nfigure 1: writes reaching etcd during a plan of %d objects: see each run (goal 0)\n", objects)
	fmt.Printf("figure 2: plan time / real converge time of the same %d objects, median of %d run(s): %.2fx (goal <= 1.0x; runs %s)\n", objects, runs, median(ratios), format(ratios))
	differ, total, err := b.upgrade(ctx, "upgrade", upgrade)
	if err != nil {
		return err
	}
	fmt.Printf("figure 3: objects whose plan differs from what the real reconcile then wrote, one upgrade of %d ConfigWatchers (%d objects compared: watchers and pods): %d (goal 0)\n", upgrade, total, differ)
	return nil
}

// watchers creates ns with n ConfigWatchers sharing one ConfigMap.
func (b *bench) watchers(ctx context.Context, ns string, n int) error {
	if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: objectMeta("", ns)}); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(ns, "shared"), Data: map[string]string{"k": "v"}}
	if err := b.c.Create(ctx, cm); err != nil {
		return err
	}
	return parallel(n, func(i int) error {
		cw := &v1.ConfigWatcher{ObjectMeta: objectMeta(ns, fmt.Sprintf("cw-%04d", i)),
			Spec: v1.ConfigWatcherSpec{ConfigMap: "shared", PodSelector: map[string]string{"app": fmt.Sprintf("cw-%04d", i)}}}
		return b.c.Create(ctx, cw)
	})
}
