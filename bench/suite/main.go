// Command suite is `make bench`: opzero against controller-runtime, side by
// side in one run on the local control plane. It prints a table and writes
// docs/benchmarks.md (with docs/bench-rss.svg). Every figure is the median of
// several runs with min-max; ratios are computed within this run.
//
//	go run ./bench/suite                 # everything
//	go run ./bench/suite -only coldstart # exec -> ready / first reconcile at 2000 ConfigMaps
//	go run ./bench/suite -only scaleout  # 1, 2, 4 instances behind a balancer, 50 ms external call
//	go run ./bench/suite -only leasestream # scaleout's steady stream alone: Lease writes per reconcile
//	go run ./bench/suite -only telemetry # OTLP export off vs on: cold start, RSS, per-event time
//	go run ./bench/suite -only wakeup    # the wakeup source with 10k, 100k and 1M records pending
//	go run ./bench/suite -only worth     # always-on memory of each wiring at zero, instance time under unrelated churn
//	go run ./bench/suite -only worth -worth-objects 0,2000 -churn 1m # the same, smaller and shorter
//	go run ./bench/suite -only fleet     # ten operators classic vs served unchanged at zero by the hub (opzero hub adopt)
//	go run ./bench/suite -only hubadd    # the hub's RSS with N and N+1 unchanged operators at zero, 10k ConfigMaps (and Secrets, a new kind)
//	go run ./bench/suite -only bundles   # examples/bundles at zero: unrelated ConfigMap/Secret/Namespace changes, an owned child deleted
//	go run ./bench/suite -only idle -idle-for 1h # the CronJob-style project (no observedGeneration) at zero with nothing changing: the sweeps' instance time
//	go run ./bench/suite -only hubscale  # one hub, 100 Subscriptions, 100k ConfigMaps: memory, delivery latency beside a watch's, CPU
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/go-logr/logr"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
)

var operators = []string{"controller-runtime", "opzero", "opzero-notrim", "opzero-linked", "opzero-classic", "opzero-before"}

// baseline is the commit before issue 16's changes to memory, cold start
// and the wakeup source: "before" (today's variant) is built from it with
// the same flags, so a ratio within one run isolates what changed.
const baseline = "5042ed28a2275c39dec4ea788071e5b7c0c5fe6b"

func main() {
	only := flag.String("only", "", "run one part: memory, coldstart, throughput, intake, scaleout (leasestream: only its steady stream), telemetry, worth, fleet, hubadd, bundles, idle, hubscale or wakeup; worth, fleet, hubadd, bundles, idle, hubscale and throughput alone replace their own sections of -out and keep the rest")
	flag.IntVar(&hubscaleOps, "hubscale-ops", hubscaleOps, "hubscale: operators (Subscriptions), one namespace each")
	flag.IntVar(&hubscaleObjects, "hubscale-objects", hubscaleObjects, "hubscale: ConfigMaps of 1 KiB, spread over the operators' namespaces")
	flag.IntVar(&hubscaleChanges, "hubscale-changes", hubscaleChanges, "hubscale: changes in the measured stream")
	flag.Float64Var(&hubscaleRate, "hubscale-rate", hubscaleRate, "hubscale: changes per second in the stream")
	flag.DurationVar(&hubscaleSettle, "hubscale-settle", hubscaleSettle, "hubscale: how long the hub runs after every Subscription is Ready before its memory is read")
	flag.IntVar(&hubscaleReplicas, "hubscale-replicas", hubscaleReplicas, "hubscale: hub processes to run (more than 1 needs their sharding flags in -hubscale-hub-args)")
	flag.StringVar(&hubscaleCSV, "hubscale-csv", "", "hubscale: also write each change's figures (its PATCH, the watches', every delivery's latency) to this CSV file")
	flag.StringVar(&hubscaleHubArgs, "hubscale-hub-args", hubscaleHubArgs, "hubscale: more flags for every hub replica; {i} and {n} become the replica's index and the replica count")
	flag.StringVar(&worthObjects, "worth-objects", worthObjects, "worth: the ConfigMap counts of its rows, ascending (objects are added row by row)")
	flag.DurationVar(&worthSettle, "worth-settle", worthSettle, "worth, fleet, hubadd: how long the always-on processes run after ready (hubadd: after every Deployment is at zero) before their RSS is read")
	flag.StringVar(&hubaddOps, "hubadd-ops", hubaddOps, "hubadd: the operator counts N, ascending, each measured beside N+1 (at most 9)")
	flag.IntVar(&hubaddObjects, "hubadd-objects", hubaddObjects, "hubadd: ConfigMaps of 1 KiB, and as many Secrets")
	flag.StringVar(&fleetObjects, "fleet-objects", fleetObjects, "fleet: the ConfigMap counts of its rows, ascending")
	flag.DurationVar(&worthChurn, "churn", worthChurn, "worth, fleet: how long the unrelated churn runs for each serverless wiring; bundles: for the three kinds of change, a third each")
	flag.IntVar(&wakeupsPending, "wakeups", 1_000_000, "how many Wakeups are pending in the wakeup part's largest run (after 10k and 100k)")
	runs := flag.Int("runs", 3, "runs per figure (cold start uses at least 10)")
	out := flag.String("out", "docs/benchmarks.md", "report to write (empty: none)")
	flag.StringVar(&pprofDir, "pprof", "", "build the opzero operators and testop (scale-out) with -tags opzero_pprof and have each instance write a CPU profile, a heap profile and an execution trace into this folder, and in scale-out take a 3 s CPU profile of the API server from each phase's first event (the figures are then not the ones to report)")
	refresh := flag.Bool("refresh-analysis", false, "measure nothing: replace the \"Reading the figures\" part of -out with this suite's text (after editing the text, without a new run)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the suite itself (the in-process intake part runs the engine here) to this file")
	flag.Parse()
	if *refresh {
		if err := refreshAnalysis(*out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*only, *runs, *out); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// wakeupsPending is -wakeups.
var wakeupsPending int

func run(only string, runs int, out string) error {
	ctx := context.Background()
	if pprofDir != "" { // relative to where the suite was started, not the repo root
		var err error
		if pprofDir, err = filepath.Abs(pprofDir); err != nil {
			return err
		}
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "opzero-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if only == "worth" || only == "hubscale" || only == "fleet" || only == "hubadd" || only == "idle" || only == "bundles" { // a plane and builds of its own: nothing else is needed
		r := &report{figs: map[string]float64{}}
		part := worth
		switch only {
		case "hubscale":
			part = hubScale
		case "fleet":
			part = fleet
		case "hubadd":
			part = hubAdd
		case "idle":
			part = idlePart
		case "bundles":
			part = bundles
		}
		if err := part(ctx, r, dir); err != nil {
			return err
		}
		if out == "" {
			return nil
		}
		if err := mergeSection(out, r.sections[0]); err != nil {
			return err
		}
		if only == "fleet" || only == "hubadd" || only == "bundles" || only == "idle" {
			return nil
		}
		return r.writeWorthSVG(out)
	}
	fmt.Println("building the operators ...")
	baseSrc := filepath.Join(dir, "baseline-src")
	if out, err := exec.Command("bash", "-c", fmt.Sprintf("mkdir -p %s && git archive %s | tar -x -C %s", baseSrc, baseline, baseSrc)).CombinedOutput(); err != nil {
		return fmt.Errorf("the source at %s (git archive): %v\n%s", baseline[:7], err, out)
	}
	before := buildCmd("", filepath.Join(dir, "opzero-before"), "./examples/configwatcher")
	before.Dir = baseSrc
	if out, err := before.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./examples/configwatcher at %s: %v\n%s", baseline[:7], err, out)
	}
	for _, b := range []struct{ name, pkg, tags string }{
		{"opzero", "./examples/configwatcher", ""}, // the default build: serverless only
		// classic mode linked (examples/configwatcher/classic.go imports
		// operator/classic): run serverless ("opzero-linked") and classic
		{"opzero-linked", "./examples/configwatcher", "opzero_classic"},
		{"controller-runtime", "./bench/crbaseline", ""},
		{"testop", "./internal/testop", ""},
		{"opzero-hub", "./cmd/opzero-hub", ""}, // the throughput part's hub variants
	} {
		tags := b.tags
		if pprofDir != "" && profiled(b.name) {
			tags = strings.TrimPrefix(tags+",opzero_pprof", ",")
		}
		if out, err := buildCmd(tags, filepath.Join(dir, b.name), b.pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	if pprofDir != "" {
		if err := os.MkdirAll(pprofDir, 0o755); err != nil {
			return err
		}
	}
	fmt.Println("starting the control plane ...")
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true, NoControllerManager: true, Profiling: pprofDir != ""})
	if err != nil {
		return err
	}
	defer plane.Stop(false)
	for _, dir := range []string{"examples/configwatcher/config/crd", "config/crd"} { // config/crd: Wakeups, for --async
		if _, err := controlplane.InstallCRDs(ctx, plane.Config, dir); err != nil {
			return err
		}
	}
	e := &env{kubeconfig: plane.Kubeconfig, dir: dir, scheme: k8sruntime.NewScheme(), cfg: plane.Config, etcdURL: plane.EtcdURL, planePID: map[string]int{}}
	for _, pr := range plane.Processes {
		e.planePID[pr.Name] = pr.PID
	}
	_ = clientgoscheme.AddToScheme(e.scheme)
	_ = v1.AddToScheme(e.scheme)
	_ = v1alpha1.AddToScheme(e.scheme)
	cfg := *plane.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	ctrllog.SetLogger(logr.Discard()) // the suite's clients log nothing worth its report
	if e.c, err = client.New(&cfg, client.Options{Scheme: e.scheme}); err != nil {
		return err
	}
	if err := e.setup(ctx); err != nil {
		return err
	}
	r := &report{rss: map[string]map[int][]float64{}, steady: map[string]map[int][4][]float64{}, split: map[string][2][]float64{}, figs: map[string]float64{}, loadStart: loadavg()}
	// A full run writes the report after each part, so that a run stopped
	// early keeps what it measured (the goals table says "not measured").
	save := func() error {
		if out == "" {
			return nil
		}
		if only == "throughput" { // alone, it replaces its own section of -out and keeps the rest
			for _, sec := range r.sections {
				if err := mergeSection(out, sec); err != nil {
					return err
				}
			}
			return nil
		}
		if only != "" {
			return nil
		}
		return r.write(out)
	}
	parts := []struct {
		name string
		run  func() error
	}{
		{"memory", func() error {
			if only == "" || only == "memory" || only == "coldstart" {
				return e.memoryAndColdStart(ctx, r, only, runs)
			}
			return nil
		}},
		{"throughput", func() error { return e.throughput(ctx, r, runs) }},
		{"intake", func() error { return intake(r, runs) }},
		{"scaleout", func() error { return e.scaleOut(ctx, r, runs) }},
		{"leasestream", func() error { // part of scaleout; alone only when asked for
			if only != "leasestream" {
				return nil
			}
			var b strings.Builder
			err := e.leaseStream(ctx, r, &b, runs)
			r.add("Scale-out: a steady stream", b.String())
			return err
		}},
		{"telemetry", func() error { return e.telemetryCost(ctx, r, runs) }},
		{"worth", func() error { return worth(ctx, r, dir) }},
		{"hubscale", func() error { return hubScale(ctx, r, dir) }},
		{"wakeup", func() error { return e.wakeups(ctx, r, wakeupsPending) }}, // last: it leaves its records in etcd
	}
	for _, p := range parts {
		if only != "" && only != p.name && !(p.name == "memory" && only == "coldstart") {
			continue
		}
		if err := p.run(); err != nil {
			return err
		}
		if err := save(); err != nil {
			return err
		}
	}
	return nil
}
