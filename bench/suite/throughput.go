package main

// Why this file is over 500 lines: it is one benchmark (its variants, the
// run, the CPU and API-request accounting and the report table), which
// the variants share.

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/knative"
	"github.com/opzero/opzero/internal/proc"
)

const tpObjects = 2000

// tpVariants: the baseline; opzero answering after the reconcile (the
// default) with one real adapter and with four; --async; opzero answering
// at admission (--answer=admitted) with the generated wiring (one
// ApiServerSource per kind: ConfigWatchers and ConfigMaps) and the event
// cache (--event-cache), without the cache, and with four ConfigWatcher
// sources; and the raw limit. Every object carries a shard label (0-3) in
// every variant. $OPZERO_BENCH_TP_VARIANTS (comma-separated) runs a subset
// (controller-runtime and raw are always run: the ratios need them).
var tpVariants = []string{"controller-runtime", "opzero", "opzero-4src", "opzero-async",
	"opzero-admitted", "opzero-admitted-nocache", "opzero-admitted-4src", "opzero-hub", "opzero-hub-admitted", "opzero-hub-default", "opzero-hub-before", "raw"}

// tpVariant describes how a serverless variant is run.
type tpVariant struct {
	args      []string // operator flags beyond --mode=serverless --insecure-no-auth
	selectors []string // one ConfigWatcher source per label selector
	cmSource  bool     // a ConfigMap source too (Resource mode), as opzero manifests generates
	// hub: fed by the opzero hub (cmd/opzero-hub) through a Subscription
	// as `opzero manifests --source=hub` writes it (ConfigWatchers in
	// Resource mode, ConfigMaps in Reference mode referenced by
	// spec.configMap) instead of Knative's adapters.
	hub bool
	// hubConcurrency, if set, is the Subscription's spec.delivery.concurrency.
	hubConcurrency int
	env            []string // environment beyond KUBECONFIG, PORT and POD_NAMESPACE
	// durable: --wakeup-sink (the operator's own address) and the
	// Subscription's wakeups, as the manifests write them with durable
	// time on (the default).
	durable bool
}

// tpDefault is what `opzero manifests` writes for the ConfigWatcher
// (internal/manifests/testdata/golden/serverless: the Knative Service's
// args and env, the Subscription), but for authentication
// (--insecure-no-auth: the bench's hub sends no token) and the wakeup
// sink's address (the operator's own port); TestThroughputDefaultIsTheGolden
// keeps them in step.
var tpDefault = tpVariant{args: []string{"--event-cache"}, env: []string{"OPZERO_MAX_SCALE=3", "OPZERO_HUB_PEERS=opzero-hub-peers.opzero-system.svc:8081"}, durable: true, hub: true}

var tpServerless = map[string]tpVariant{
	"opzero":                  {selectors: []string{""}},
	"opzero-4src":             {selectors: []string{"shard=0", "shard=1", "shard=2", "shard=3"}},
	"opzero-async":            {args: []string{"--async"}, selectors: []string{""}},
	"opzero-admitted":         {args: []string{"--answer=admitted", "--event-cache"}, selectors: []string{""}, cmSource: true},
	"opzero-admitted-nocache": {args: []string{"--answer=admitted"}, selectors: []string{""}, cmSource: true},
	"opzero-admitted-4src":    {args: []string{"--answer=admitted", "--event-cache"}, selectors: []string{"shard=0", "shard=1", "shard=2", "shard=3"}, cmSource: true},
	"opzero-hub":              {hub: true},
	"opzero-hub-admitted":     {args: []string{"--answer=admitted", "--event-cache"}, hub: true},
	"opzero-hub-default":      tpDefault,
	// the manifests' wiring before issue 37's part 4 (c2b183f): no event
	// cache, a Lease per key (max-scale 3)
	"opzero-hub-before": {args: []string{"--per-key-leases"}, env: []string{"OPZERO_MAX_SCALE=3"}, durable: true, hub: true},
}

func tpSelected() []string {
	want := os.Getenv("OPZERO_BENCH_TP_VARIANTS")
	if want == "" {
		return tpVariants
	}
	var out []string
	for _, v := range tpVariants {
		if v == "controller-runtime" || v == "raw" || slices.Contains(strings.Split(want, ","), v) {
			out = append(out, v)
		}
	}
	return out
}

// throughput: 2000 ConfigWatchers created, time until every one has
// observedGeneration == generation: controller-runtime (MaxConcurrentReconciles
// 4), opzero serverless fed by Knative's real ApiServerSource adapter, and the
// raw limit (a bare client creating and writing the same status at
// concurrency 16).
func (e *env) throughput(ctx context.Context, r *report, runs int) error {
	res := map[string][]float64{}
	cpuPer := map[string]map[string][]float64{}   // variant -> process group -> CPU ms per object, per run
	inFlight := map[string][]float64{}            // variant -> reconciler calls in flight on average, per run
	requests := map[string]map[string][]float64{} // variant -> "VERB resource" -> API requests per object, per run
	variants := tpSelected()
	if tpSplitCores {
		restore, err := e.splitCores()
		if err != nil {
			return err
		}
		defer restore()
	}
	for i := 0; i < runs; i++ {
		// Each run starts at another variant: a fixed order put the same
		// variant first on a fresh API server and the raw limit always last,
		// after the most deletions, and the API server's CPU per object
		// drifted with the position (the raw limit, with no operator's
		// watches at all, measured more than controller-runtime).
		for k := range variants {
			v := variants[(i+k)%len(variants)]
			ns := fmt.Sprintf("tp-%s-%d", v, i)
			fmt.Printf("  throughput %s run %d ...\n", v, i+1)
			run, err := e.throughputOnce(ctx, v, ns)
			if err != nil {
				return fmt.Errorf("throughput %s: %w", v, err)
			}
			res[v] = append(res[v], tpObjects/run.d.Seconds())
			if run.inFlight > 0 {
				inFlight[v] = append(inFlight[v], run.inFlight)
			}
			if requests[v] == nil {
				requests[v] = map[string][]float64{}
			}
			for k, n := range run.requests {
				requests[v][k] = append(requests[v][k], n)
			}
			for g, c := range run.cpu {
				if cpuPer[v] == nil {
					cpuPer[v] = map[string][]float64{}
				}
				cpuPer[v][g] = append(cpuPer[v][g], float64(c)/float64(time.Millisecond)/tpObjects)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d ConfigWatchers created at concurrency 16 until all have observedGeneration == generation; objects per second, median (min-max) of %d runs. Each run's objects are deleted once it has ended, so that every run starts on the same cluster (left, each controller-runtime manager would reconcile the earlier runs' objects again while it is measured). The variants take turns: run k starts at the k-th variant, so no variant always runs first on a fresh API server or last after every other's deletions.\n\n", tpObjects, runs)
	figPrefix := "tp-"
	if tpSplitCores {
		figPrefix = "tp-split-" // not the goals' figures: those share the 2 cores
		fmt.Fprintf(&b, "**Cores split (OPZERO_BENCH_TP_CPUS=split): kube-apiserver and etcd on CPU 0, the suite and every process it starts (operators, adapters, the hub) on CPU 1**, as a cluster keeps its control plane off its operators' nodes.\n\n")
	}
	fmt.Fprintf(&b, "| variant | objects/s | vs controller-runtime | vs raw limit |\n|---|---|---|---|\n")
	cr, raw := fmedian(res["controller-runtime"]), fmedian(res["raw"])
	for _, v := range variants {
		name := map[string]string{
			"controller-runtime":      "controller-runtime (MaxConcurrentReconciles 4)",
			"opzero":                  "opzero serverless, answer after the reconcile (default; real ApiServerSource adapter, 8 concurrent keys)",
			"opzero-4src":             "opzero serverless, answer after the reconcile, 4 ApiServerSources each selecting a quarter of the objects by label",
			"opzero-async":            "opzero serverless --async (202 after one Wakeup write, reconcile afterwards), one ApiServerSource",
			"opzero-admitted":         "opzero serverless --answer=admitted --event-cache, the generated wiring (one ApiServerSource per kind: ConfigWatchers, ConfigMaps)",
			"opzero-hub":              "opzero serverless, answer after the reconcile, fed by the opzero hub (`--source=hub`: one Subscription, the hub sending up to 16 objects at once)",
			"opzero-hub-admitted":     "opzero serverless --answer=admitted --event-cache, fed by the opzero hub",
			"opzero-hub-default":      "**the default wiring** (`opzero manifests`: the hub, answer after the reconcile, --event-cache, max-scale 3: one instance runs alone under the sole Lease, durable time)",
			"opzero-hub-before":       "the default wiring before issue 37 part 4 (c2b183f: no event cache, a Lease per key at max-scale 3, durable time)",
			"opzero-admitted-nocache": "the same without --event-cache (the ConfigMap GET goes to the API server)",
			"opzero-admitted-4src":    "opzero serverless --answer=admitted --event-cache, 4 ConfigWatcher sources by label + the ConfigMap source",
			"raw":                     "raw limit (bare client, create + status write, concurrency 16)"}[v]
		m := fmedian(res[v])
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f |\n", name, fstatsInt(res[v]), m/cr, m/raw)
		r.fig(figPrefix+v+"-cr", m/cr)
		r.fig(figPrefix+v+"-raw", m/raw)
	}
	fmt.Fprintf(&b, "\nCPU per object, ms (user + system, from /proc, from the first create until the last object converged; median of %d runs): where the 2 cores go. The suite is the creating client and the watch that sees the objects converge. In flight: the opzero operator's reconciler calls at once, on average over the run (the sum of their durations, `controller_runtime_reconcile_time_seconds_sum`, over the run's), against its `--max-concurrent-reconciles` (8 by default).\n\n", runs)
	groups := []string{"api server", "etcd", "operator", "adapters", "suite"}
	fmt.Fprintf(&b, "| variant | %s | total | total vs raw limit | in flight |\n|---|---|---|---|---|---|---|---|---|\n", strings.Join(groups, " | "))
	total := func(v string) float64 {
		t := 0.0
		for _, g := range groups {
			if c := cpuPer[v][g]; len(c) > 0 {
				t += fmedian(c)
			}
		}
		return t
	}
	for _, v := range variants {
		fmt.Fprintf(&b, "| %s |", v)
		for _, g := range groups {
			if c := cpuPer[v][g]; len(c) > 0 {
				fmt.Fprintf(&b, " %.2f |", fmedian(c))
			} else {
				fmt.Fprintf(&b, " - |")
			}
		}
		fmt.Fprintf(&b, " %.2f | %.2f |", total(v), total(v)/total("raw"))
		if f := inFlight[v]; len(f) > 0 {
			fmt.Fprintf(&b, " %.1f |\n", fmedian(f))
			r.fig(figPrefix+v+"-inflight", fmedian(f))
		} else {
			fmt.Fprintf(&b, " - |\n")
		}
		r.fig(figPrefix+v+"-cpu", total(v))
	}
	fmt.Fprintf(&b, "\nAPI requests per object (apiserver_request_total over the same window, median of %d runs; WATCH counts watches opened, not the events they carry), requests of at least 0.01 per object:\n\n| variant | total | requests |\n|---|---|---|\n", runs)
	for _, v := range variants {
		var keys []string
		total := 0.0
		for k, ns := range requests[v] {
			if m := fmedian(ns); m >= 0.01 && !isWork(k) {
				keys = append(keys, k)
				total += m
			}
		}
		slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(fmedian(requests[v][b]), fmedian(requests[v][a])) })
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.2f", k, fmedian(requests[v][k]))
		}
		fmt.Fprintf(&b, "| %s | %.2f | %s |\n", v, total, strings.Join(parts, ", "))
		r.fig(figPrefix+v+"-requests", total)
	}
	fmt.Fprintf(&b, "\nThe API server's work per object besides (same window, median of %d runs; every resource): the watch events it sent to every watcher (apiserver_watch_events_total) and their size (apiserver_watch_events_sizes), and the request bodies it read (apiserver_request_body_size_bytes). Where these and the requests match, a variant's larger API server CPU is not more work asked of it.\n\n| variant | watch events | watch KiB | request body KiB |\n|---|---|---|---|\n", runs)
	for _, v := range variants {
		fmt.Fprintf(&b, "| %s |", v)
		for _, k := range []string{workWatchEvents, workWatchKiB, workBodyKiB} {
			fmt.Fprintf(&b, " %.2f |", fmedian(requests[v][k]))
		}
		b.WriteString("\n")
	}
	r.add("Throughput", b.String())
	return nil
}

// tpRun is what one throughput run measured.
type tpRun struct {
	d        time.Duration            // first create to the last object converged
	cpu      map[string]time.Duration // CPU used meanwhile, by process group
	inFlight float64                  // reconciler calls in flight on average (serverless)
	requests map[string]float64       // API requests per object by "VERB resource"
}

func (e *env) throughputOnce(ctx context.Context, variant, ns string) (run tpRun, err error) {
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return run, err
	}
	// Registered first, so it runs last, once the operator has stopped: the
	// next run starts on the same cluster as this one did. Left in place,
	// this run's 2000 objects would be listed by the next
	// controller-runtime manager at its start and reconciled again inside
	// its measured window (the raw limit's, whose status differs, each
	// rewritten), so its rate would depend on the runs before it.
	defer func() {
		if cerr := e.deleteWatchers(ctx, ns); err == nil {
			err = cerr
		}
	}()
	if err := e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: ns}}); err != nil {
		return run, err
	}
	groups := map[string][]int{"api server": {e.planePID["kube-apiserver"]}, "etcd": {e.planePID["etcd"]}, "suite": {os.Getpid()}}
	var exited <-chan struct{} // closed if the opzero operator dies
	var metrics string         // its /metrics
	switch variant {
	case "controller-runtime":
		stop, pid, err := e.startCR()
		if err != nil {
			return run, err
		}
		defer stop()
		groups["operator"] = []int{pid}
	case "raw":
	default:
		op, err := e.startServerless(ctx, ns, variant)
		if err != nil {
			return run, err
		}
		defer op.stop()
		exited, metrics = op.exited, op.metrics
		groups["operator"], groups["adapters"] = op.pids[:1], op.pids[1:]
	}
	conv, err := e.watchConvergence(ctx, ns)
	if err != nil {
		return run, err
	}
	defer conv.close()
	req0, err := e.apiRequests(ctx)
	if err != nil {
		return run, err
	}
	cpu0 := cpuOf(groups)
	t0 := time.Now()
	if pprofDir != "" {
		defer e.profileAPIServer(ctx, "apiserver-"+ns)()
	}
	if err := e.createWatchers(ctx, ns, variant == "raw"); err != nil {
		return run, err
	}
	if err := conv.wait(ctx, tpObjects, t0, 5*time.Minute, exited); err != nil {
		return run, err
	}
	d := time.Since(t0)
	cpu := cpuOf(groups)
	for g := range cpu {
		cpu[g] -= cpu0[g]
	}
	req1, err := e.apiRequests(ctx)
	if err != nil {
		return run, err
	}
	run.requests = map[string]float64{}
	for k, n := range req1 {
		if n -= req0[k]; n > 0 {
			run.requests[k] = n / tpObjects
		}
	}
	if metrics != "" {
		// Reconciler calls in flight, on average: their summed time over
		// the run's (Little's law). It reads as busy slots out of
		// --max-concurrent-reconciles.
		busy, err := histogramSum(ctx, metrics, "controller_runtime_reconcile_time_seconds")
		if err != nil {
			return run, err
		}
		run.inFlight = busy / d.Seconds()
	}
	run.d, run.cpu = d, cpu
	return run, nil
}

// histogramSum adds up the sums of one histogram (every label set) that
// url serves.
func histogramSum(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading the operator's metrics: %w", err)
	}
	defer resp.Body.Close()
	m, err := parseMetrics(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	sum, found := m.sum(name, nil)
	if !found {
		return 0, fmt.Errorf("%s serves no %s", url, name)
	}
	return sum, nil
}

// cpuOf is the CPU time each group of processes has used so far.
func cpuOf(groups map[string][]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for g, pids := range groups {
		for _, pid := range pids {
			c, _ := proc.CPU(pid) // an exited process adds nothing
			out[g] += c
		}
	}
	return out
}

func (e *env) createWatchers(ctx context.Context, ns string, writeStatus bool) error {
	return forEach(ctx, 16, 0, tpObjects, func(ctx context.Context, i int) error {
		cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cw-%04d", i), Labels: map[string]string{"shard": fmt.Sprint(i % 4)}},
			Spec: v1.ConfigWatcherSpec{ConfigMap: "cfg", PodSelector: map[string]string{"app": "x"}}}
		if err := e.c.Create(ctx, cw); err != nil || !writeStatus {
			return err
		}
		cw.Status.ObservedGeneration = cw.Generation
		meta.SetStatusCondition(&cw.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Watching", Message: "raw"})
		return e.c.Status().Update(ctx, cw)
	})
}

// deleteWatchers deletes the ConfigWatchers in ns and waits until none is
// left.
func (e *env) deleteWatchers(ctx context.Context, ns string) error {
	if err := e.c.DeleteAllOf(ctx, &v1.ConfigWatcher{}, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("deleting the ConfigWatchers of %s: %w", ns, err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list := &v1.ConfigWatcherList{}
		if err := e.c.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ConfigWatchers of %s still there 2 minutes after their deletion", ns)
		}
	}
}

func (e *env) startCR() (func(), int, error) {
	cmd := exec.Command(filepath.Join(e.dir, "controller-runtime"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	stop := func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
	s := bufio.NewScanner(out)
	for s.Scan() {
		if s.Text() == "READY" {
			go func() {
				for s.Scan() {
				}
			}()
			return stop, cmd.Process.Pid, nil
		}
	}
	stop()
	return nil, 0, fmt.Errorf("controller-runtime operator exited before READY")
}

// tpOperator is a running serverless variant: the operator and its
// sources.
type tpOperator struct {
	stop    func()
	exited  <-chan struct{} // closed if the operator ends before stop
	pids    []int           // the operator's, then the adapters'
	metrics string          // the operator's /metrics
}

// startServerless starts the operator and its sources.
func (e *env) startServerless(ctx context.Context, ns, variant string) (*tpOperator, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tv := tpServerless[variant]
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--mode=serverless", "--insecure-no-auth", fmt.Sprintf("--metrics-addr=127.0.0.1:%d", mport)}, tv.args...)
	if variant == "opzero-async" || tv.durable {
		args = append(args, fmt.Sprintf("--wakeup-sink=http://127.0.0.1:%d", port))
	}
	cmd := exec.Command(filepath.Join(e.dir, "opzero"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, fmt.Sprintf("PORT=%d", port), "POD_NAMESPACE="+ns)
	cmd.Env = append(cmd.Env, tv.env...)
	cmd.Env = append(cmd.Env, profileEnv(variant+"-throughput")...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	gone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(gone) }()
	type source struct {
		sel string
		res knative.Resource
	}
	var sources []source
	for _, sel := range tv.selectors {
		sources = append(sources, source{sel, knative.Resource{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers", LabelSelector: sel}})
	}
	if tv.cmSource {
		sources = append(sources, source{"", knative.Resource{Version: "v1", Resource: "configmaps"}})
	}
	if tv.hub {
		hub, err := e.startHub(ctx, ns, port, tv.hubConcurrency, tv.durable)
		if err != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-gone
			return nil, err
		}
		stop := func() {
			hub.stop()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-gone
		}
		return &tpOperator{stop: stop, exited: gone, pids: []int{cmd.Process.Pid, hub.pid}, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)}, nil
	}
	var adapters []*knative.Adapter
	stop := func() {
		for _, a := range adapters {
			a.Stop()
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-gone
	}
	for i, src := range sources {
		a, err := knative.StartApiServerSource(ctx, knative.ApiServerSourceConfig{
			Name: fmt.Sprintf("tp-%s-%d", ns, i), Namespaces: []string{ns}, Mode: "Resource", Kubeconfig: e.kubeconfig,
			Sink:      fmt.Sprintf("http://127.0.0.1:%d", port),
			Resources: []knative.Resource{src.res},
		})
		if err != nil {
			stop()
			return nil, err
		}
		adapters = append(adapters, a)
	}
	time.Sleep(time.Second) // its reflector lists and watches before the first create
	if tv.cmSource {
		// A warm instance has seen its ConfigMap: change it once, so that
		// its event reaches the operator before the ConfigWatchers exist.
		cm := &corev1.ConfigMap{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cfg"}, cm); err != nil {
			stop()
			return nil, err
		}
		cm.Data = map[string]string{"warm": "1"}
		if err := e.c.Update(ctx, cm); err != nil {
			stop()
			return nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	op := &tpOperator{stop: stop, exited: gone, pids: []int{cmd.Process.Pid}, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)}
	for _, a := range adapters {
		op.pids = append(op.pids, a.PID())
	}
	return op, nil
}

// tpSubscription is the Subscription in ns as `opzero manifests` writes it
// for the ConfigWatcher (TestThroughputDefaultIsTheGolden), to the operator
// at port, of service account tp-op; concurrency (if set) is its
// spec.delivery.concurrency, wakeups its spec.wakeups.
func tpSubscription(ns string, port, concurrency int, wakeups bool) *unstructured.Unstructured {
	sub := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "opzero.dev/v1alpha1", "kind": "Subscription",
		"metadata": map[string]any{"namespace": ns, "name": "configwatcher"},
		"spec": map[string]any{
			"operator": "configwatcher", "serviceAccountName": "tp-op",
			"sink": map[string]any{"uri": fmt.Sprintf("http://127.0.0.1:%d", port)},
			"resources": []any{
				map[string]any{"apiVersion": "k8spatterns.io/v1", "kind": "ConfigWatcher", "mode": "Resource", "namespaces": []any{ns}, "skipObserved": map[string]any{}},
				map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "mode": "Reference", "namespaces": []any{ns},
					"referencedBy": map[string]any{"apiVersion": "k8spatterns.io/v1", "kind": "ConfigWatcher", "fieldPath": "spec.configMap"}},
			},
		},
	}}
	if concurrency > 0 {
		sub.Object["spec"].(map[string]any)["delivery"] = map[string]any{"concurrency": int64(concurrency)}
	}
	if wakeups {
		sub.Object["spec"].(map[string]any)["wakeups"] = true
	}
	return sub
}

// tpHub is a running opzero hub.
type tpHub struct {
	pid  int
	stop func()
}

// startHub starts the opzero hub (admin credentials: the bench plane runs
// no kube-controller-manager to aggregate its role) and a Subscription in
// ns as `opzero manifests --source=hub` writes it, with the operator at
// port as its sink; it returns once the Subscription is Ready.
func (e *env) startHub(ctx context.Context, ns string, port, concurrency int, wakeups bool) (*tpHub, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tp-op"}}
	if err := e.c.Create(ctx, sa); err != nil {
		return nil, err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tp-op-" + ns},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "tp-op"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"}}
	if err := e.c.Create(ctx, crb); err != nil {
		return nil, err
	}
	sub := tpSubscription(ns, port, concurrency, wakeups)
	if err := e.c.Create(ctx, sub); err != nil {
		return nil, fmt.Errorf("creating the Subscription (is config/crd installed?): %w", err)
	}
	cmd := exec.Command(filepath.Join(e.dir, "opzero-hub"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.Env = append(cmd.Env, profileEnv("opzero-hub-"+ns)...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	gone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(gone) }()
	h := &tpHub{pid: cmd.Process.Pid, stop: func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-gone
		_ = e.c.Delete(context.WithoutCancel(ctx), crb)
	}}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-gone:
			return false, fmt.Errorf("the hub exited")
		default:
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sub.GroupVersionKind())
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(sub), u); err != nil {
			return false, err
		}
		return subscriptionReady(u), nil
	})
	if err != nil {
		h.stop()
		return nil, fmt.Errorf("the hub's Subscription in %s not Ready: %w", ns, err)
	}
	time.Sleep(time.Second) // its watches start from the Subscription's version: nothing is missed, this only keeps the start out of the measured window
	return h, nil
}
