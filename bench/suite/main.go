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
//	go run ./bench/suite -only hubscale  # one hub, 100 Subscriptions, 100k ConfigMaps: memory, delivery latency beside a watch's, CPU
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

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
	only := flag.String("only", "", "run one part: memory, coldstart, throughput, intake, scaleout (leasestream: only its steady stream), telemetry, worth, hubscale or wakeup; worth, hubscale and throughput alone replace their own sections of -out and keep the rest")
	flag.IntVar(&hubscaleOps, "hubscale-ops", hubscaleOps, "hubscale: operators (Subscriptions), one namespace each")
	flag.IntVar(&hubscaleObjects, "hubscale-objects", hubscaleObjects, "hubscale: ConfigMaps of 1 KiB, spread over the operators' namespaces")
	flag.IntVar(&hubscaleChanges, "hubscale-changes", hubscaleChanges, "hubscale: changes in the measured stream")
	flag.Float64Var(&hubscaleRate, "hubscale-rate", hubscaleRate, "hubscale: changes per second in the stream")
	flag.DurationVar(&hubscaleSettle, "hubscale-settle", hubscaleSettle, "hubscale: how long the hub runs after every Subscription is Ready before its memory is read")
	flag.IntVar(&hubscaleReplicas, "hubscale-replicas", hubscaleReplicas, "hubscale: hub processes to run (more than 1 needs their sharding flags in -hubscale-hub-args)")
	flag.StringVar(&hubscaleCSV, "hubscale-csv", "", "hubscale: also write each change's figures (its PATCH, the watches', every delivery's latency) to this CSV file")
	flag.StringVar(&hubscaleHubArgs, "hubscale-hub-args", hubscaleHubArgs, "hubscale: more flags for every hub replica; {i} and {n} become the replica's index and the replica count")
	flag.StringVar(&worthObjects, "worth-objects", worthObjects, "worth: the ConfigMap counts of its rows, ascending (objects are added row by row)")
	flag.DurationVar(&worthSettle, "worth-settle", worthSettle, "worth: how long the always-on processes run after ready before their RSS is read")
	flag.DurationVar(&worthChurn, "churn", worthChurn, "worth: how long the unrelated churn runs for each serverless wiring")
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

type report struct {
	loadStart string             // /proc/loadavg's 1-minute figure when the run began
	figs      map[string]float64 // the figures the goals table reads (goals.go)
	sections  []string
	rss       map[string]map[int][]float64 // operator -> count -> runs
	split     map[string][2][]float64      // operator -> file-backed, anonymous MiB at 0 ConfigMaps
	// steady: operator -> count -> RSS, file-backed, anonymous MiB and
	// per-event ms after steadyEvents more reconciles
	steady map[string]map[int][4][]float64
	// worthSVG is the worth part's plot (docs/bench-worth.svg), if it ran.
	worthSVG string
}

func (r *report) add(title, body string) {
	fmt.Printf("\n## %s\n\n%s", title, body)
	r.sections = append(r.sections, "## "+title+"\n\n"+body)
}

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
	if only == "worth" || only == "hubscale" { // a plane and builds of its own: nothing else is needed
		r := &report{figs: map[string]float64{}}
		part := worth
		if only == "hubscale" {
			part = hubScale
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

// memoryAndColdStart starts each operator against 0, 2000 and 10000
// ConfigMaps: RSS once it has reconciled its first event, and (at 2000) exec
// -> ready and exec -> first event reconciled.
func (e *env) memoryAndColdStart(ctx context.Context, r *report, only string, runs int) error {
	counts := []int{0, 2000, 10000}
	if only == "coldstart" {
		counts = []int{2000}
	}
	cold := map[string][2][]time.Duration{}
	for _, n := range counts {
		fmt.Printf("  %d ConfigMaps ...\n", n)
		if err := e.ensureConfigMaps(ctx, n); err != nil {
			return err
		}
		for _, op := range operators {
			k := runs
			if n == 2000 && op != "opzero-classic" && k < 10 {
				k = 10
			}
			for i := 0; i < k; i++ {
				sm, err := e.once(ctx, op, only != "coldstart" && i < runs)
				if err != nil {
					return fmt.Errorf("%s with %d ConfigMaps: %w", op, n, err)
				}
				ready, first, mem := sm.ready, sm.first, sm.mem
				if sm.steady.total > 0 {
					st := r.steady[op]
					if st == nil {
						st = map[int][4][]float64{}
						r.steady[op] = st
					}
					v := st[n]
					v[0], v[1], v[2] = append(v[0], sm.steady.total), append(v[1], sm.steady.file), append(v[2], sm.steady.anon)
					v[3] = append(v[3], float64(sm.perEvent)/float64(time.Millisecond))
					st[n] = v
				}
				if r.rss[op] == nil {
					r.rss[op] = map[int][]float64{}
				}
				r.rss[op][n] = append(r.rss[op][n], mem.total)
				if n == 0 {
					sp := r.split[op]
					sp[0], sp[1] = append(sp[0], mem.file), append(sp[1], mem.anon)
					r.split[op] = sp
				}
				if n == 2000 {
					c := cold[op]
					c[0], c[1] = append(c[0], ready), append(c[1], first)
					cold[op] = c
				}
			}
		}
	}
	if only != "coldstart" {
		var b strings.Builder
		fmt.Fprintf(&b, "RSS once the first event is reconciled, MiB, median (min-max) of %d runs. Each operator watches ConfigWatchers and ConfigMaps (1 KiB each).\n\n", runs)
		fmt.Fprintf(&b, "| ConfigMaps | controller-runtime | opzero serverless | opzero serverless, no trim | opzero serverless, classic linked, no trim | opzero classic | opzero serverless, before (%s) | no trim / controller-runtime | no trim / classic linked | no trim / before |\n|---|---|---|---|---|---|---|---|---|---|\n", baseline[:7])
		for _, n := range counts {
			cr, sl, nt, linked, cl, bf := r.rss["controller-runtime"][n], r.rss["opzero"][n], r.rss["opzero-notrim"][n], r.rss["opzero-linked"][n], r.rss["opzero-classic"][n], r.rss["opzero-before"][n]
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f |\n", n, fstats(cr), fstats(sl), fstats(nt), fstats(linked), fstats(cl), fstats(bf), fmedian(nt)/fmedian(cr), fmedian(nt)/fmedian(linked), fmedian(nt)/fmedian(bf))
			r.fig("rss-first", math.Max(r.figs["rss-first"], fmedian(sl)))
			r.fig("rss-linked", math.Max(r.figs["rss-linked"], fmedian(linked)))
		}
		if counts[0] == 0 {
			b.WriteString("\nAt 0 ConfigMaps, file-backed (the binary's code and data pages) + anonymous (heap, stacks, runtime) MiB, medians:")
			for _, op := range operators {
				fmt.Fprintf(&b, " %s %.1f + %.1f;", label(op), fmedian(r.split[op][0]), fmedian(r.split[op][1]))
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "\nSteady state: after %d more reconciles (PingSource events naming the target, one after another, each answered 200; then 0.5 s idle), RSS = file-backed + anonymous MiB, medians, and the median time per event (send -> answer), serverless variants:\n\n| ConfigMaps | opzero serverless | opzero serverless, no trim | opzero serverless, classic linked, no trim | opzero serverless, before (%s) |\n|---|---|---|---|---|\n", steadyEvents, baseline[:7])
		for _, n := range counts {
			fmt.Fprintf(&b, "| %d |", n)
			for _, op := range []string{"opzero", "opzero-notrim", "opzero-linked", "opzero-before"} {
				v := r.steady[op][n]
				fmt.Fprintf(&b, " %.1f = %.1f + %.1f, %.2f ms |", fmedian(v[0]), fmedian(v[1]), fmedian(v[2]), fmedian(v[3]))
			}
			b.WriteString("\n")
			r.fig("rss-steady", math.Max(r.figs["rss-steady"], fmedian(r.steady["opzero"][n][0])))
		}
		// The goal's figure: the larger of the two, so that neither a
		// snapshot right after the trim nor one before it decides alone.
		r.fig("rss-default", math.Max(r.figs["rss-first"], r.figs["rss-steady"]))
		b.WriteString("\n\"opzero serverless\" is the example's default build, serverless only (its main does not import `operator/classic`: controller-runtime's manager is not linked and `--mode=classic` is refused), which trims once after its first answer (internal/trim: once idle for 100 ms, the heap's garbage is returned and the binary's code and read-only pages are unmapped; what the next events run is mapped again); \"no trim\" is the same binary with `OPZERO_TRIM=off`; \"classic linked\" is the example built with `-tags opzero_classic`, whose classic.go imports `operator/classic`, run serverless with `OPZERO_TRIM=off` (what the default build was before both changes), and \"opzero classic\" that binary run `--mode=classic`. The RSS right after the first reconcile is read 0.5 s after it, so after the trim: the steady-state table is the figure to read, and the ratios in the first table compare the default build with the trim off (a snapshot of the trimmed process would flatter it).\n")
		b.WriteString("\n![RSS against the number of ConfigMaps](bench-rss.svg)\n")
		r.add("Memory", b.String())
	}
	fmt.Println("  cold starts through the activator ...")
	via := map[string][]time.Duration{}
	for _, v := range activatorVariants {
		for i := 0; i < max(runs, 10); i++ {
			d, err := e.viaActivator(ctx, v.bin, v.audience)
			if err != nil {
				return fmt.Errorf("cold start through the activator, %s: %w", v.label, err)
			}
			via[v.label] = append(via[v.label], d)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "2000 ConfigMaps present; exec of the operator binary to ready (controller-runtime: caches synced; opzero: accepting connections) and to its first event reconciled (observed in the API server). Median (min-max) of 10 runs.\n\n")
	fmt.Fprintf(&b, "| operator | exec -> ready | exec -> first event reconciled |\n|---|---|---|\n")
	for _, op := range []string{"controller-runtime", "opzero", "opzero-linked", "opzero-before"} {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", label(op), stats(cold[op][0]), stats(cold[op][1]))
	}
	fmt.Fprintf(&b, "\nexec -> first event reconciled: opzero serverless is **%.1fx** faster.\n", float64(median(cold["controller-runtime"][1]))/float64(median(cold["opzero"][1])))
	fmt.Fprintf(&b, "\nThrough `opzero dev`'s activator (internal/devenv/activator, in the suite's process): the event reaches it with no instance running; it execs the operator, polls /healthz every 2 ms, proxies the event and answers when the operator has answered (2xx: reconciled; the suite checks the status). Event -> answer, median (min-max) of %d runs:\n\n| operator | event at zero -> reconciled |\n|---|---|\n", max(runs, 10))
	for i, v := range activatorVariants {
		fmt.Fprintf(&b, "| %s | %s |\n", v.label, stats(via[v.label]))
		r.fig(fmt.Sprint("cold-activator-", i), float64(median(via[v.label]))/float64(time.Millisecond))
	}
	r.add("Cold start", b.String())
	return nil
}

// activatorVariants are the cold starts measured through the activator.
var activatorVariants = []struct{ label, bin, audience string }{
	{"opzero serverless, --insecure-no-auth", "opzero", ""},
	{"opzero serverless, --audience (a TokenReview at the first request)", "opzero", "opzero-bench"},
	{"opzero serverless, classic linked, --insecure-no-auth", "opzero-linked", ""},
	{"opzero serverless, before (" + baseline[:7] + "), --insecure-no-auth", "opzero-before", ""},
	{"opzero serverless, before (" + baseline[:7] + "), --audience", "opzero-before", "opzero-bench"},
}

// buildCmd is go build as the suite builds the operators: CGO_ENABLED=0,
// as ko builds the images `opzero manifests` deploys.
func buildCmd(tags, out, pkg string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-tags", tags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

func label(op string) string {
	switch op {
	case "opzero":
		return "opzero serverless"
	case "opzero-notrim":
		return "opzero serverless, no trim"
	case "opzero-linked":
		return "opzero serverless, classic linked, no trim"
	case "opzero-classic":
		return "opzero classic"
	case "opzero-before":
		return "opzero serverless, before (" + baseline[:7] + ")"
	}
	return op
}

func (r *report) write(out string) error {
	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nWritten by `make bench` (`go run ./bench/suite`) on %s: %s, %d CPUs, %s/%s, %s, on the local control plane (kube-apiserver v1.34.3, etcd v3.6.4). Baseline: `bench/crbaseline`, the same ConfigWatcher reconciler on a plain controller-runtime v0.25.2 manager.\n\n",
		time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&b, "Load: the 1-minute load average was %s when the run began and %s when this was written, on %d CPUs: other work shared the machine, so compare figures within this run.\n\n", r.loadStart, loadavg(), runtime.NumCPU())
	_, measured := r.figs["wk-rss"]
	b.WriteString(r.goals())
	b.WriteString(strings.Join(r.sections, "\n"))
	if !measured && wakeupSeparateSection != "" {
		b.WriteString("\n## The wakeup source, measured separately\n\n" + wakeupSeparateSection)
	}
	b.WriteString(analysis)
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := r.writeWorthSVG(out); err != nil {
		return err
	}
	// The plot shows steady state where it was measured (the serverless
	// variants), else the RSS after the first reconcile.
	plotted := map[string]map[int][]float64{}
	for op, byN := range r.rss {
		plotted[op] = map[int][]float64{}
		for n, v := range byN {
			if st := r.steady[op][n][0]; len(st) > 0 {
				v = st
			}
			plotted[op][n] = v
		}
	}
	return os.WriteFile(filepath.Join(filepath.Dir(out), "bench-rss.svg"), []byte(rssSVG(plotted)), 0o644)
}

// writeWorthSVG writes the worth part's plot beside the report, if it ran.
func (r *report) writeWorthSVG(out string) error {
	if r.worthSVG == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(filepath.Dir(out), "bench-worth.svg"), []byte(r.worthSVG), 0o644)
}

// analysis says what bounds the figures that miss (or missed) their
// targets, from profiles; each bullet names the commands that reproduce them.
const analysis = `
## Reading the figures

Profiles behind these conclusions: ` + "`go run ./bench/suite -only throughput -runs 1 -pprof /tmp/prof`" + ` builds
the opzero operators and testop with ` + "`-tags opzero_pprof`" + ` (internal/profile), and each instance writes
` + "`<variant>-throughput-<n>.cpu.pprof`, `.heap.pprof` and `.trace`" + ` when it exits
(profiling and tracing slow it: read ratios, not rates, from such a run);
` + "`-cpuprofile FILE`" + ` profiles the suite itself, where the intake part runs the engine.
Numbers quoted here are from such single runs on this 2-core machine while
other work shared it.

- **Serverless RSS: the default build now leaves classic mode out and
  trims after its first answer; at steady state it is ~21.5 MiB, under 24.**
  Read the steady-state table (after 200 more reconciles): right after the
  first reconcile the anonymous part has not grown to its working size and,
  with the trim, the code pages are not mapped back yet, so that snapshot
  (~7 MiB with the trim) says nothing about a warm instance. What each change
  saved, steady state, medians at 0, 2000, 10000 ConfigMaps
  (` + "`go run ./bench/suite -only memory -runs 3`" + `, one run, the variants side by
  side; a second run gave the same within 0.5 MiB): classic mode linked only by importing ` + "`operator/classic`" + ` (the
  "classic linked, no trim" column, what the default build was, against
  "no trim") -3.1, -3.4, -2.6 MiB (34.6 -> 31.5; file-backed 25.6 -> 23.2,
  anonymous 8.9 -> 8.3; after the first reconcile 32.2 -> 29.0); the trim
  (internal/trim, "no trim" against the default) -10.0, -9.7, -10.0 more
  (31.5 -> 21.5), all file-backed (23.2 -> 13.1): once the instance has
  answered its first event and been idle 100 ms, ` + "`debug.FreeOSMemory`" + ` and
  ` + "`madvise(MADV_DONTNEED)`" + ` on the executable's r-x and r-- mappings (never
  a writable one, nor one holding a private copy of a page). That unmaps
  what package init and the first request touched (the scheme registering
  every built-in kind, discovery, TLS set-up) and the 64 KiB the kernel maps
  around each fault; the next events map back what they run, 4 KiB pages
  and their fault-around, which is the 13 MiB left. It is exactly that: the
  pages stay in the page cache (clean, shared by every instance of the
  binary on the node), so a cgroup that read them is still charged for
  them until the kernel reclaims them, which it can do without touching a
  process; RSS, the figure here, counts mapped pages. Per event it
  costs nothing measurable: in six alternating runs of 400 sequential
  events each (the same binary, the default against ` + "`OPZERO_TRIM=off`" + `),
  the median of the runs' per-event medians was 3.5 against 4.1 ms over the
  200 events right after the trim (which pay its minor faults) and 4.2
  against 4.8 over the next 200: below this loaded machine's noise (the
  per-event column of the steady-state table moves 0.7-1.4x between
  variants and runs while other work shares the cores).
  ` + "`OPZERO_TRIM=off`" + ` turns it off, ` + "`OPZERO_TRIM=heap`" + ` keeps only
  ` + "`FreeOSMemory`" + `. Tried and not kept: ` + "`FreeOSMemory`" + ` alone (-0.8 MiB
  anonymous right after the first reconcile, nothing at steady state: the
  heap grows back to the collector's goal); ` + "`madvise(MADV_RANDOM)`" + ` before
  the drop (nothing: it does not stop fault-around); ` + "`GOGC=50`" + ` (-1.5 MiB
  anonymous at steady state, more collector work per event) and
  ` + "`GOMEMLIMIT=12MiB`" + ` (-2.2; it slowed cold start to ~100 ms before, when
  the collector ran during package init), neither a default.
  Where the steady-state 21.5 is (` + "`python3 hack/resident-by-package.py PID`" + `
  after 400 events): 13.2 file-backed, of which r-x 5.0 (net/http, crypto/tls,
  k8s.io/api/core/v1, apimachinery's meta/v1, reflect, the engine) and
  r-- 7.9: the function tables (pclntab, 3.3: every stack the collector
  scans and every traceback reads them), type descriptors (3.0: JSON and
  the scheme reflect over the types) and go: func data (1.5); and 8.3-9.0
  anonymous: the heap at the collector's goal under a stream of events,
  stacks and the runtime. Lower would need fewer types reached by
  reflection (controller-runtime's ` + "`pkg/client`" + ` imports client-go's
  kubernetes/scheme, which registers all 56 built-in API groups; a client
  on client-go's REST client with only the kinds used would shed most of
  the type descriptors and k8s.io/api's code) or a smaller heap goal.
- **Cold start through the activator: 99.4 ms in this report (sixth
  session's second ` + "`make bench`" + `, 2026-11-26), against 40: missed; on
  this machine the linked libraries' package init alone takes 34-40 ms
  and main is entered ~50 ms after exec.** Within the run the default
  build is 0.82x the engine before through the activator (99.4 against
  121.3 ms); the session's first ` + "`make bench`" + `, an hour earlier on the
  same code path, read 75.8 against 84.9 (0.89x), and the fifth
  session's 91.9 against 107.0 (0.86x): the absolute figure moves by a
  third between runs on this machine, the ratio much less. The direct
  starts' figures overlap (exec -> ready 75.4 ms, 63.6-87.8, against
  79.5, 69.5-110.5). controller-runtime's pkg/client imports client-go's
  kubernetes/scheme and metadata (client.go), so every reconciler that
  uses client.Client links their init: an absolute 40 ms is below the
  floor of "existing reconcilers run unchanged" on this machine. Every figure of the
  part is about 2-3x the earlier reports' on another machine of the same
  kind (the engine before took 27.2 ms through the activator in the
  second session's report, 52.8 ms in the fourth's). Where the start's
  time goes, on the quiet machine before this run (the default build of
  examples/configwatcher, CGO_ENABLED=0):
  ` + "`GODEBUG=inittrace=1 ./configwatcher --help`" + ` (5 runs): package init
  sums to 37-45 ms over 310 packages: client-go's kubernetes/scheme,
  registering every built-in group, 9.0 ms; controller-runtime's
  client/apiutil, registering them all again into its protobuf scheme,
  3.6; structured-merge-diff 1.5; Prometheus 1.4; client-go's exec
  credential plugin 1.2; the OTLP protos about 1.5; then a long tail
  under 1 ms each. ` + "`perf stat -r 10`" + ` of the same: 60 ms elapsed, 65 ms of
  CPU, 1565 minor page faults; ` + "`perf record -g`" + ` puts about 30% of the
  samples in the kernel's page-fault path (this VM's paravirtualized
  fault handling) and a few percent in the runtime's own set-up (itabs,
  the first GC). A serverless start against an idle control plane,
  timed from the shell's exec with inittrace on: the inits end at
  ~52 ms, main logs "starting" at ~71 ms (the example's main registers
  every built-in kind into its own scheme once more, as kubebuilder's
  scaffold does, then operator.New and the builder), and the port
  listens at ~72 ms; the first event's reconcile then takes ~35-45 ms
  more (exec -> first event reconciled 118.4 ms). Tried: GOGC=off and
  GOGC=400 for the start (10 runs each beside the default, one run):
  exec -> ready 83.7 and 81.2 against 85.2 ms, through the activator
  89.1 and 91.0 against 101.9 ms, within the spread (72-111 ms); not
  made a default. What would cut it: not linking client-go's
  kubernetes/scheme (controller-runtime's pkg/client imports it, and
  apiutil registers it a second time at init), i.e. a client on
  client-go's REST client that registers only the kinds the operator
  uses, the same change the RSS bullet names; a design change, not made.
  Sixth session (2026-11-26), a start of the same build timed with
  temporary timestamps (main's entry, each API request's start and end,
  the handler's entry and answer; 5 starts against an idle local plane,
  the event sent as soon as the port accepts): main is entered at
  49-52 ms (exec, the runtime and package init), operator.New and the
  builder are done by 53-57 ms, the port listens at 58-63 ms and the event
  is in the handler at 60-67 ms. Its reconcile then waits for its first
  requests' TLS handshake and the two discoveries (GET /api/v1, /apis/
  k8spatterns.io/v1: 8-13 ms from the first request), then the
  ConfigMap's GET (3.7-4 ms) and the status write (4.8-6.3 ms); the
  answer leaves 77-90 ms after exec. Re-tried: starting those discoveries
  in the background when the operator registers, so that the reconcile
  finds them on their way. Three interleaved pairs of 15 starts gave
  86.6, 83.0, 97.9 ms without against 87.2, 83.7, 97.2 with (exec ->
  answer, medians): the warm-up's handshake competes with main for the
  2 cores and moves listen later by what the reconcile gains, as the
  fourth session found; not kept.
- **Cold start: the first reconcile no longer discovers the whole API.**
  controller-runtime's mapper answers its first question with aggregated
  discovery: GET /api and GET /apis, every resource of every group,
  decoded into a mapper of every kind. The serverless client's mapper
  (operator/mapper.go) discovers only the group-version asked for (GET
  /api/v1, GET /apis/k8spatterns.io/v1; counted with the API server's
  ` + "`apiserver_request_total`" + `) and falls back to controller-runtime's for
  anything else. Listen -> answer of the first event went from 18-27 ms to
  15 ms in interleaved single runs here; in the tables, exec -> first event
  reconciled went from 35.6 to 32.4 ms, and through the activator from
  27.2 to 25.3 ms, with a TokenReview at the first request (` + "`--audience`" + `)
  from 31.0 to 25.7 ms (the review and the reconcile share the connection
  that discovery no longer fills first). A
  warm-up that resolved the mappings in the background while the server
  started gained nothing measurable (the event arrives as soon as
  /healthz answers) and was dropped. The rest of a cold start is exec and
  package init (above) and the reconcile's own requests.
- **The wakeup source in this report (sixth session's second
  ` + "`make bench`" + `, 2026-11-26, alone on the machine): at 1M pending, RSS
  32.8 MiB (peak 40.6), fire lateness p99 13.2 ms; at 100k, 32.6 MiB
  (peak 41.3), p99 4.2 ms, ready in 11.7 s (1.03x the paged start's
  11.4 s), against the source before at 128.7 MiB (peak 290.7): both
  targets met at both counts.** The peak at start is not a target and
  sits at ~40 MiB (the initial events' stream; the memory-limit trial in
  the fifth session's note gained 1-3 MiB and was not made). The 1M start
  took 2m39s (the API server 139 s of CPU, etcd 36, the source 107); the
  whole ` + "`make bench`" + ` took 38m01s. The session's first run read 32.5 MiB
  (peak 39.3), p99 23.7 ms at 1M; the fifth session's report had its
  100k row taken while a test build shared the cores (p99 152.9 ms),
  which made its goal row read "no".
- **The wakeup source holds a window, not every record.** It keeps at most
  ` + "`--window`" + ` (10000) records in memory, the earliest due, plus strays
  (records without a valid ` + "`opzero.dev/due-bucket`" + ` label: written before
  the label existed, or by hand). The Store labels each record with its
  due second; the source watches every record, holds those due before its
  cutoff, and lists the next seconds by label (` + "`in (...)`" + `, up to 64 a
  request) when the window runs below half or the clock nears its end. A
  label, not a field selector: neither selects a range, and a CRD field
  selector (selectableFields) allows only equality, where a label
  selector takes a set of values on any API server. Delivery order and
  "nothing lost" are tested on the real API server:
  ` + "`TestSourceWindow`" + ` (a window of 40 over 300 records, strays, writes and
  deletes while it runs, a fake clock) and ` + "`TestSourceKilledWithPending`" + `
  (SIGKILLed twice while delivering; 10k records with a window of 1000 in
  ` + "`make test`" + `, ` + "`OPZERO_WAKEUPS=100000`" + ` for 100k with a window of 10000).
  The bench loads the pending records straight into etcd (` + "`loadWakeups`" + `,
  bench/suite/wakeupload.go): creating them through the API server went at
  165-300/s here (1 to 8 clients, 32 to 256 creates at once; custom
  resources have no protobuf encoding), so 1M would take one to two hours.
  Two records are created through the API, the rest rendered from the
  first one's stored bytes (the render of the second must equal its stored
  bytes), put one per etcd revision through etcd's JSON gateway, then
  counted by a paginated list and sampled by GET through the API server.
  The load is bounded by the API server taking each write into its watch
  cache, etcd's gateway (one put a request) and the other work on the 2
  cores: 900-1900 records/s, so 1M took 12-18 minutes here (900k in
  11m56s with the load at 5-8); ` + "`go run ./bench/suite -only wakeup`" + `
  took 25.6 minutes in all (builds and ready at 1M, 8m36s, included). What the source holds does not depend on
  the count (the window): its RSS at 1M is that at 100k. What grows is the
  API server: its watch cache holds every record (kube-apiserver's RSS
  reached 17-20 GiB at 1M, ~15-20 KiB a record: the bench needs ~22 GiB
  free at 1M; etcd's database 1.4 GB, hence the plane's 8 GiB quota), and
  the read of every record at start sets exec -> ready. The source at
  9992df8 listed them in pages of 500 (7m29s at 1M, 11.6 s at 100k in the
  last full report). Measured with the CPU each process used from exec to
  ready (utime+stime from /proc, the table's CPU column), that start cost
  etcd 0.1 s and kube-apiserver 9.8 s at 100k, 1.8 s and 69.2 s at 250k
  (98 then 277 µs of API server CPU a record): in 1.34 the continued pages
  are served from snapshots of the watch cache (ListFromCacheSnapshot, beta
  and on), not from etcd, and the cacher answers each page by copying every
  record after the continue key (btreeStore.ListPrefix, called by
  waitAndListExactRV in k8s.io/apiserver v0.34.3 pkg/storage/cacher) before
  it takes 500 of them: n/500 pages of O(n) each. Where no snapshot is
  left a page goes to etcd, which counts the rest of the range
  (remainingItemCount): O(n) a page too (the earlier 1M run saw etcd at
  62%). The source now starts from its watch's initial events
  (sendInitialEvents=true, resourceVersionMatch=NotOlderThan; WatchList is
  on by default in 1.34): the cache sends every record once as an ADDED
  event, then a bookmark annotated k8s.io/initial-events-end, and the same
  watch goes on; the source is ready at that bookmark. A server that
  refuses initial events gets the paged lists (--paged-start forces them;
  TestSourceStart covers both). One run side by side on the quiet machine,
  ` + "`go run ./bench/suite -only wakeup -wakeups 250000 -out \"\"`" + ` (paged:
  the source at 9992df8, pages of 500; paged 5000: today's with
  ` + "`--paged-start --page-size 5000`" + `), exec -> ready against paged: initial
  events 0.73x at 10k (780 ms against 1.07 s), 1.04x at 100k (10.34 against
  9.98 s), 0.66x at 250k (32.1 against 49.1 s); pages of 5000 1.44x, 0.71x,
  0.43x (21.2 s at 250k). Peak RSS at 250k: 40.5 (initial events), 59.2
  (pages of 5000), 33.3 MiB (pages of 500). So the start is now linear but
  not yet far lower: the initial events cost kube-apiserver ~92-116 µs of
  CPU a record (each encoded as its own watch event) and the source ~88-102
  µs (the event's envelope, then the object: the paged start decoded ~32 µs
  a record), where the paged start's linear part is ~70 + 32 µs; it wins
  only where the square dominates (from ~250k; at 1M, extrapolated, not
  measured: ~2-3 minutes against 7.5). Pages of 5000 divide the square by
  ten and keep the cheaper decode, but hold a page of decoded records: +26
  MiB of peak, over the 40 MiB goal. The initial events' peak is ~7 MiB
  above the paged start's and the same at 100k and 250k (bounded, not per
  record; probably the stream arriving faster than it is decoded, buffered
  up to HTTP/2's 4 MiB stream window: not profiled), at the goal's edge.
  Next: decode the watch stream in one pass (type and object together), or
  start ready from the buckets near now and the strays while the full read
  goes on. Not measured above 250k (at 1M the API server needs ~22 GiB).
  A label-selected
  list (` + "`in (...)`" + `) is answered from the watch cache by reading every
  record of the namespace: 1.26 s at 1M for 64 buckets that held none. The source reads by label about
  once a minute when idle and on its keeper's goroutine, while what it
  holds is delivered from memory, so such a list does not delay a fire
  unless it outlasts the window's lead (a minute). While the cache lags
  behind etcd (during the load) a list waits for it and fails with 504
  "Too large resource version"; the bench retries its count until it
  passes. Fire lateness is the process getting the CPU: on this machine,
  with other work at a load of 7-16, one stall of a few hundred ms moves
  the p99 of a 10 s run of probes.
- **Throughput, scale-out and Leases** (from the ` + "`" + `throughput` + "`" + ` branch's notes, docs/perf-notes-throughput.md, with its commands). Its profile run: ` + "`" + `OPZERO_BENCH_TP_VARIANTS=opzero-admitted,opzero go run ./bench/suite -only throughput -runs 1 -pprof /tmp/prof` + "`" + `
(profiling slows the operators; read ratios). In that run the generated
wiring with ` + "`" + `--answer=admitted --event-cache` + "`" + ` converged at 85 objects/s:
1.61x controller-runtime (53/s) and 0.77 of the raw limit (110/s), where
answering after the reconcile gave 42/s (0.80x). One run does not make the
goal met; two unprofiled runs in the notes gave 0.87x and 0.41x.

- **Converge 2000, against controller-runtime: missed once the runs are
  independent; the earlier reports' ratios were inflated by the
  benchmark.** Until the sixth session (2026-11-26) each throughput run
  left its 2000 ConfigWatchers in place, and every later
  controller-runtime manager listed them at its start and reconciled them
  again inside its own measured window, rewriting the raw limit's
  (whose status the suite writes, message "raw"). Counted with the API
  server's apiserver_request_total around each run (a temporary counter,
  ` + "`OPZERO_BENCH_TP_VARIANTS=controller-runtime,opzero-admitted go run ./bench/suite -only throughput -runs 5 -out \"\"`" + `):
  controller-runtime's first run, with nothing left over, converged at 257
  objects/s writing the status 2000 times; its later runs wrote it 3124,
  4467, 3482 and 4774 times (all accepted) and converged at 144, 114, 108
  and 66/s. Under opzero the same reconciler wrote it 2000 times in
  every run (generation-aware skipping leaves objects whose
  observedGeneration is current). The fifth session's report read its
  baseline as the median of runs 80, 82 and 176/s, two of them after
  leftovers (2.04x for the generated wiring); earlier reports' baselines
  were measured the same way. The suite now
  deletes each run's objects once it has ended. With that, the part
  alone (` + "`go run ./bench/suite -only throughput -runs 3 -out \"\"`" + `, the same
  counter, 2000 status writes in every run of every variant):
  controller-runtime 209 objects/s (166-246), the generated wiring 201
  (180-203): 0.96x controller-runtime and 0.79 of raw (254); 4 sources
  180 (164-188), 0.86x; the default answer 66/s, 0.32x. This report
  (sixth session's second ` + "`make bench`" + `, with the cleanup):
  controller-runtime 235 (161-247), the generated wiring 182 (167-190),
  0.77x and 0.76 of raw (240), 4 sources 0.63x. So a controller-runtime
  manager that starts on an otherwise empty cluster converges at 0.82-0.98
  of the raw limit: it makes the same API calls as the raw limit (the
  suite's create, one status write; its reads come from its informer
  cache), so it is at the least work any operator can do, and 1.2x of it
  would be at or above the raw limit itself (251-282 objects/s against
  240-254): not reachable by any operator on this baseline. opzero adds
  the adapter's watch and the CloudEvent of each object (next bullet) to
  the same 2 cores. What the goal can mean instead is a planning
  question: a baseline that pays for a cluster's existing objects, as a
  real manager does at every start (the memory part's 10000 ConfigMaps
  are the only such objects here), or a target against the raw limit.
- **Throughput with one source: the 2 cores bound it, and opzero's
  path costs 1.2-1.35x the raw limit's CPU per object.** The CPU table
  (from /proc, every process of the run) accounts for the 2 cores: on the
  quiet machine (20:40 UTC, 2026-11-23, session 4, ` + "`" + `OPZERO_BENCH_TP_VARIANTS=opzero-admitted go run ./bench/suite -only throughput -runs 2 -out ""` + "`" + `
  with an 8- and a 16-slot variant), the generated wiring converged at 228
  objects/s using 8.75 ms of CPU per object, the raw limit at 285/s using
  6.88 ms: both 2.0 cores, and 0.80 of raw, where the CPU ratio predicts
  0.79. The API server costs the same per object either way (4.9 ms: a
  watch event is encoded once for all its watchers); opzero's path adds
  the adapter's watch and CloudEvent encoding of two events per object
  (its create, and its status write's update, which the operator skips),
  1.0 ms, and the operator's intake and status write, 1.3 ms, less the
  creating client's share. Reconcile slots are not the bound: every one
  was busy for the whole run (7.9 of 8 in flight, 15.7 of 16), but 16
  slots gave the same rate as 8 (228 against 231/s), so the default stays
  8; what keeps them busy is the status write's latency on saturated
  cores. Until this session's report the suite waited for convergence by
  listing all 2000 objects every 50 ms, which took the API server's CPU
  from the operator being measured (the raw limit, whose client writes
  the status itself, listed once): that is why the report before read
  0.55 of raw, and the watch that replaced it reads 0.80. The operator's
  CPU profile (` + "`" + `OPZERO_BENCH_TP_VARIANTS=opzero-admitted go run ./bench/suite -only throughput -runs 1 -out "" -pprof /tmp/prof` + "`" + `,
  ` + "`" + `go tool pprof -top -cum /tmp/prof/opzero-admitted-throughput-1.cpu.pprof` + "`" + `):
  1.17 ms per object, 27% of it the status write (client-go encoding, HTTP/2
  and decoding the answer, as in controller-runtime), 25% the intake of
  both events (CloudEvent decoding 12%, of which reading the object's
  metadata for routing 5% and decoding it for the stand-in GET 6%), the
  rest the runtime (GC, scheduling, syscalls).
- **The event cache saves the reconcile's one read that is not its own
  object** (the ConfigMap GET): the reconcile then makes one API request,
  its status write, as controller-runtime's does. It gave 100 against 76
  objects/s in the notes' run 3 (48 against 33 and 48 against 47 on the saturated
  machine): the API server's headroom decides how much a saved GET shows.
- **Fed by the hub (issue 26): at parity with controller-runtime, not
  clearly above it.** With ` + "`--answer=admitted --event-cache`" + `: 0.97x in
  the run above (347 against 359 objects/s, median of 5; 0.80x answering
  after the reconcile), 1.00x (284 against 284) in a run of the same
  command on 2026-11-27 before issue 28c was merged, and 0.98x with the
  API server on a core of its own (below). The goal, >= 1.0x, is met in
  one run of three and missed by 2-3% in the others, less than the
  figures move between quiet runs (controller-runtime's median was 284
  in one and 359 in the next). CPU per object in the run above: 5.68 ms
  against 5.50; the API server and etcd take the same (3.60 and 0.52
  against 3.62 and 0.58; 2 requests per object each), the operator
  less than controller-runtime's manager (0.64 against 0.72), and the
  hub adds 0.35. What changed since the 0.93x run: the engine's key
  queue runs the next waiting key on the goroutine of the run that
  ended (its grown stack kept) instead of a new goroutine per run.
  - *Where the bound is.* ` + "`" + `OPZERO_BENCH_TP_CPUS=split OPZERO_BENCH_TP_VARIANTS=opzero-hub-admitted go run ./bench/suite -only throughput -runs 5 -out ""` + "`" + `
    pins kube-apiserver and etcd to CPU 0 and the suite with every
    process it starts (operators, the hub) to CPU 1, as a cluster keeps
    its control plane off its operators' nodes: controller-runtime 278
    (268-319), the hub wiring 274 (263-312), the raw limit 295; both
    wirings at 0.93-0.94 of raw, with 3.59 and 3.64 ms of API server and
    etcd CPU per object (3.36 for raw) on the one core they have. The
    API server is the bound, and both wirings ask it for the two
    requests the raw limit makes: neither the hub nor the operator can
    take the figure clearly past 1.0x; only fewer or cheaper API
    requests than controller-runtime's could. On 2 shared cores the
    hub's 0.35 ms, less the operator's 0.08 saved, is 3% of the CPU per
    object: halving it would move the figure by about 1.5%, under the
    noise.
  What is left to take: the hub's JSON is still scanned about five times
  per event (the framer, the watch event envelope, the head, each check
  of validity); one HTTP request per event on both sides of the hop
  (CloudEvents' batch mode would carry several, but Knative's adapter
  never sends it, and the operator takes either wiring's events
  unchanged). Whether converge must read >= 1.0x on 2 shared cores,
  where it is a coin toss, is a planning question.
- **Four sources help only while the machine has headroom.** With
  answering at admission, one source already keeps every reconcile slot
  busy; four sources split the event stream over four adapter processes,
  which helps when one adapter's delivery loop is the slowest part (the notes' run 3:
  132 against 100 objects/s) and costs when the 2 cores are saturated
  (runs 1-2: 26 and 60 against 48 and 48).
- **Scale-out: the Lease writes no longer take the reconcile slot; what
  is left is the API server's latency at 4x the request rate.** This
  report (sixth session's second ` + "`make bench`" + `, 2026-11-26): 3.55x with
  Resource-mode events (61 objects/s at 4 instances, 59-68 over 3 runs,
  against 17 with one), 3.11x with Reference-mode events in the same run
  (51 against 16). The session's first ` + "`make bench`" + `, on the same path,
  read 3.80x (66, 61-68) and 3.40x, and the fifth session's 3.58x and
  3.35x: three runs of one engine at 3.55-3.80, so the figure moves
  with the API server's headroom from run to run (below) and straddles
  3.7 rather than meeting it. The
  part now reads the goal on Resource mode, what the generated wiring's
  ApiServerSources send: the event's object stands in for the
  reconcile's GET, so each key costs the API server 3 requests (status
  write, Lease create and delete) instead of 4, and the ratio rose by
  0.23 within the run; it is still short of 3.7, for the reason below
  (the API server's latency at 4x the rate: with one GET fewer per key
  there is less of it, not none). The fourth session's report: 3.56x (59 objects/s at 4 instances, 52-62 over
  3 runs, against 17 with one); one run of the part alone earlier in the
  session, with the machine shared with other work but the suite's poll
  replaced by a watch, gave 3.91x; the profile below bounds it at about
  4 x 61 / 76 = 3.2x when the API server's answers slow down, and at 4x
  when they do not, so the figure moves with the API server's headroom in
  each run. The 200-object run sends one event per
  key, so each key still costs a Lease create before its reconcile and a
  delete after (1 s later, once idle, in a queue run of its own). With a
  Locker the engine now lets its per-key queue run up to twice
  ` + "`" + `--max-concurrent-reconciles` + "`" + ` keys and takes one of
  ` + "`" + `--max-concurrent-reconciles` + "`" + ` reconcile slots only around the
  reconciler call (internal/engine/serverless/slot.go): with one slot
  (containerConcurrency 1), one key's create overlaps another key's
  reconcile, which then waits for the slot holding its Lease, and the
  idle delete does not wait for a reconcile (unless as many keys already
  hold their Leases waiting for the slot). Events that arrive while a key
  waits for the slot join its reconcile (keyq's Claim), as they joined a
  queued run before. Before this change each write (~4-5 ms against the
  55 ms reconcile) held the one slot, so one leased instance ran at
  0.85-0.92x of an unleased one. Side by side
  (` + "`" + `go run ./bench/suite -only scaleout -runs 1` + "`" + `, main at 9a03ea7
  then this change, alternating, 3 pairs): one leased instance
  0.89-0.93x -> 0.96-1.02x of an unleased one; 4 instances 2.15, 2.47,
  2.91x -> 2.68, 3.84, 3.18x of one unleased instance (2.42, 2.78, 3.13x
  -> 2.78, 3.78, 3.17x of one leased). The spread is the machine: other
  builds kept the load average at 5-12 on the 2 cores during all but the
  second "after" run (2-6), and 4 instances, the API server and etcd then
  compete for CPU (each key costs the API server a GET, a status write
  and the two Lease writes). 4 instances now fall short of 4x by the CPU
  those requests take on a shared 2-core machine, not by a slot: a leased
  instance reconciles back to back, as an unleased one does. On the quiet
  machine right after the report of 2026-11-23 (third session; it
  measured 3.59x, 57-62 objects/s at 4 instances in 3 runs), one run of
  the part alone
  (` + "`" + `go run ./bench/suite -only scaleout -runs 1 -out ""` + "`" + `) gave 3.86x (3.92x
  of one leased instance), and the CPU of every process, sampled from
  /proc every 0.5 s, shows the 4-instance phase using 0.75 of the 2 cores
  (kube-apiserver 55%, etcd 18%, the 4 instances 18%, the suite 9%): with
  the machine to itself, CPU is not what bounds it; the spread between
  runs is the other work sharing the cores.
  What bounds it, from a profile: the API server's latency for the
  reconcile's own two requests, which grows with the request rate of 4
  instances. ` + "`" + `go run ./bench/suite -only scaleout -runs 1 -pprof /tmp/scaleprof -out ""` + "`" + `
  (testop is built with the tag too; each instance writes
  ` + "`" + `testop-<phase>-i<k>-<n>.{cpu,heap}.pprof, .trace` + "`" + `, and the API server a 3 s
  CPU profile per phase, ` + "`" + `kube-apiserver-<phase>.cpu.pprof` + "`" + `; ` + "`" + `TESTOP_SPANS=FILE` + "`" + `
  in the suite's environment logs every reconcile's start and end) gave
  3.07x (50 against 16 objects/s; the machine's 2 cores busy throughout
  with other work, the part's processes 0.70 of them, sampled from
  /proc). Where a reconcile waits, from each instance's trace
  (` + "`" + `go tool trace -pprof=sync X.trace > s.pprof; go tool pprof -top -focus=subResourceClient..Update s.pprof` + "`" + `,
  likewise ` + "`" + `scripted..Reconcile` + "`" + `, ` + "`" + `Engine..acquire` + "`" + `, ` + "`" + `Held..Release` + "`" + `, ` + "`" + `slots.acquire` + "`" + `):
  one instance: GET 3.3 ms, status write 5.6 ms, the 50 ms call 51.0 ms,
  ~61 ms a reconcile; 4 instances: GET 11.3 ms, status write 12.9 ms,
  the call 51.2 ms, 75-78 ms a reconcile (each instance's slot busy
  3739-3899 ms of the 4011 ms phase). With one slot per instance the
  ratio is at most 4 x 61 / 76 = 3.2x here; 3.7x allows 4 instances at
  most ~5 ms more per reconcile than one, less what the fixed costs take (the
  first reconcile +18-52 ms after the first event, the suite's
  convergence poll +20-160 ms after the last: 60-230 ms of a 3.4-4.0 s
  phase, from the span log; the suite now follows the objects with a
  watch instead of listing all of them every 20 ms, which also took that
  list's CPU from the API server) and the instance that finishes last (round-robin gives each
  exactly 50 keys: the others ended 10-320 ms earlier). Not the bound:
  the sender (each instance had 2-5 requests waiting, one reconciling and
  one holding its Lease for the slot, for 98-99% of its trace: 16 senders
  keep 4 slots fed); the Lease writes as waits (per key, create 4.0 ->
  11.3 ms, delete 6.5 -> 14.9 ms, outside the slot: the next key waits
  54-59 ms for the slot holding its Lease, and the slot is idle 22-70 ms
  of the phase between reconciles); the instances' CPU (3.4-3.8% of a core each in their CPU
  profiles). The Lease writes cost the API server instead: its profile
  over the 4-instance phase holds 910 ms of CPU in 3 s (0.08 core with
  one unleased instance), of which status writes 210 ms, Lease creates
  110 and deletes 50, GETs 20, GC 70; creating and deleting a Lease per
  key (one event each) is 2 of each key's 4 API requests. When the API
  server is starved (a run at load 10: 2.61x), creates took up to 210 ms,
  longer than the reconcile ahead, and the slot then waited 136-319 ms
  per instance; reconciles averaged 88 ms. Nothing cheap is left in the
  engine for this workload: its slot is busy 93-98% of the phase; the
  goal needs an API server with CPU to spare (3.68x and 3.86x in
  unprofiled runs of the part when the load let it), or fewer API
  requests per key (no per-key Lease for a key seen once, e.g. Leases per
  hash bucket as knative/pkg shards: a design change).
- **Lease writes per reconcile under a steady stream: 0.24-0.25 at 4
  instances, forwarding; 2.96-5.19 marking, the engine before.** Round-robin
  sends 3 events in 4 to an instance that does not hold the key. Each
  instance records on the Leases it holds where the others reach it
  (` + "`--advertise-address`" + `, default the pod IP in a pod; ` + "`opzero dev`" + ` sets each
  instance's), and such an event is forwarded there: the holder reconciles
  it under the Lease it keeps and writes nothing for it. The forwarder's
  first event for a key costs a create the API server refuses (409: the
  suite counts it, as every request but reads) and a read; it then
  remembers the holder until the Lease's expiry, which each of the
  holder's answers extends, and forwards the key's next events without an
  API call. What is left is each holder's create, renewals and delete: per
  event 0.15-0.16 Lease writes against 0.87-0.94 when marking, where each
  foreign event marks the Lease (unless marked already) and the holder
  writes again to clear the mark. The price is in events/s (73-81 against
  92-136, two runs of ` + "`go run ./bench/suite -only leasestream -runs 1`" + `):
  a mark is answered at once and all the marks on a Lease fold into one
  rerun when the holder lets the Lease go, up to ` + "`--lease-keep-idle`" + `
  later (0.18-0.29 reconciles per event), while a forwarded event is
  answered, as any event sent to the holder, after a reconcile that started
  after it (0.62-0.64 reconciles per event, each instance reconciling one
  key at a time here): the 2xx means reconciled, and sooner.

- **Reconciles per 1000-event burst on one key are bounded by how long the
  burst takes to arrive.** The suite measures it: the 1000 requests enter the
  handler over 14-16 ms (1000 goroutines decoding CloudEvents, ~12 us of
  CPU each by the skip rate above, on 2 cores: ` + "`go run ./bench/suite -only intake -runs 1 -cpuprofile /tmp/intake.pprof`" + `,
  ` + "`binding.ToEvent`" + ` and JSON decoding lead the profile), longer than the 10
  ms reconcile. A follow-up queued as soon as a run ends (the engine before,
  the "not held" row) starts while the burst is still arriving and needs
  another: 3-4 reconciles. The engine now holds a follow-up until the key's
  events have paused for 2 ms, at most 20 ms after the previous reconcile
  ended (` + "`FollowUpSettle`, `--follow-up-settle`" + `; keyq ` + "`Options.Settle`" + `): 2 reconciles
  per burst. The contract is unchanged (a held follow-up still starts after
  every request it answers arrived; a first reconcile is never held); the
  cost is latency for events that arrive during a reconcile: up to 2 ms
  more when the burst ends near the reconcile's end, never more than 20 ms
  after it. In two intake runs the burst's answer latency p50 went from
  19.7-22.4 to 22.9-23.9 ms and its max from 32-33 to 28 ms (the burst
  detail line measures both, held and not). On a busier machine the burst
  arrived over 27-33 ms: one burst in three then needed 3 reconciles (a
  pause of 2 ms inside the burst, or arrivals past the 20 ms cap), and the
  hold cost more (p50 18.6 -> 27.9 ms, max 25.2 -> 41.0 ms). Throughput does not see the
  hold (one sender never has two events of a key in flight): 97 (87-107)
  objects/s held against 92 (74-110) not held, in a 2-run comparison.
` + wakeupSourceSection

// refreshAnalysis replaces the analysis at the end of the report at out.
func refreshAnalysis(out string) error {
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	i := strings.Index(string(b), "\n## Reading the figures")
	if i < 0 {
		return fmt.Errorf("%s has no \"Reading the figures\" part to replace", out)
	}
	return os.WriteFile(out, []byte(string(b[:i])+analysis), 0o644)
}

// loadavg is the 1-minute load average.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// wakeupsPending is -wakeups.
var wakeupsPending int

// pprofDir is -pprof: where profiled operator instances write their profiles.
var pprofDir string

var profileSeq int

// profiled says whether -pprof builds the binary or variant name with -tags
// opzero_pprof (internal/profile): the opzero operators and testop.
func profiled(name string) bool {
	return strings.HasPrefix(name, "opzero") || strings.HasPrefix(name, "testop")
}

// profileEnv is the environment that makes an operator built with -tags
// opzero_pprof write its profiles as <dir>/<name>-<n>.{cpu,heap}.pprof and
// .trace, n counting every instance of this suite run; nothing without
// -pprof.
func profileEnv(name string) []string {
	if pprofDir == "" || !profiled(name) {
		return nil
	}
	profileSeq++
	base := filepath.Join(pprofDir, fmt.Sprintf("%s-%d", name, profileSeq))
	return []string{"OPZERO_CPUPROFILE=" + base + ".cpu.pprof", "OPZERO_MEMPROFILE=" + base + ".heap.pprof", "OPZERO_TRACE=" + base + ".trace"}
}

// wakeupSourceSection is measured by hand (the commands are in it), kept
// here so that a regenerated report still carries it.
const wakeupSourceSection = `
## The wakeup source binary

Measured by hand, not by ` + "`" + `make bench` + "`" + ` (2026-11-23, the machine above). The
always-on wakeup source runs from its own binary, ` + "`" + `cmd/wakeup-source` + "`" + `, which
links neither the CLI (cobra, controller-tools, the local platform) nor the
controller-runtime manager (` + "`" + `internal/depcheck` + "`" + ` enforces both); ` + "`" + `opzero
wakeup-source` + "`" + ` runs the same code. Sizes in MB (10^6 bytes); RSS is VmRSS
after 10 s idle against the local control plane with the Wakeup CRD and no
Wakeups, MiB, min-max of 3 runs.

| binary | ` + "`" + `go build` + "`" + ` | ` + "`" + `go build -trimpath -ldflags="-s -w"` + "`" + ` | idle RSS |
|---|---|---|---|
| ` + "`" + `cmd/wakeup-source` + "`" + ` | 41.6 | 29.5 | 28.0-28.4 |
| ` + "`" + `cmd/opzero` + "`" + ` (` + "`" + `opzero wakeup-source` + "`" + `) | 50.5 | 35.8 | 33.1-33.3 |

    go build -o /tmp/bins/ ./cmd/... && ls -l /tmp/bins/
    go build -trimpath -ldflags="-s -w" -o /tmp/bins-s/ ./cmd/... && ls -l /tmp/bins-s/
    bin/opzero controlplane --dir /tmp/plane up --port 0 --no-controller-manager --crds config/crd
    export KUBECONFIG=/tmp/plane/kubeconfig
    /tmp/bins/wakeup-source --namespace default & sleep 10; grep VmRSS /proc/$!/status; kill $!
    /tmp/bins/opzero wakeup-source --namespace default & sleep 10; grep VmRSS /proc/$!/status; kill $!

What is left is controller-runtime's client: a ` + "`" + `main` + "`" + ` that only calls
` + "`" + `client.NewWithWatch` + "`" + ` builds to 38.7 MB, 93% of the wakeup source.
` + "`" + `sigs.k8s.io/controller-runtime/pkg/client` + "`" + ` imports its ` + "`" + `pkg/metrics` + "`" + `, which
imports client-go's leader election and with it every typed informer, lister
and the clientset (about 230 of the 784 packages linked). A wakeup source on
client-go's REST client alone would shed them.
`
