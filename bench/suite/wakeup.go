package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/wakeup"
)

const (
	wakeupNS = "wk"
	probes   = 1000
	// beforeMax is the most records the source before runs with: it holds
	// an entry per record (~1.2 KiB each at 100k: over 1 GiB at 1M).
	beforeMax = 100_000
	// pagedMax is the most records the paged starts (pages of 500 at
	// pagedStart, and of 5000) run with: at 1M pages of 500 took 7.5
	// minutes to be ready in the third session's report and more than the
	// part's 10 minutes in the fourth's (the API server near the machine's
	// memory), so a full run would not finish.
	pagedMax = 250_000
	// pagedStart is the commit before the source's start became a watch's
	// initial events: its windowed source lists every record at start in
	// pages of 500, and each page costs the API server a pass over the rest.
	pagedStart = "9992df8df9b7ac125d6aca011b53de06e6409937"
)

// wakeupCounts are the pending counts measured, in increasing order.
func wakeupCounts(largest int) []int {
	var out []int
	for _, n := range []int{10_000, 100_000, largest} {
		if n <= largest && (len(out) == 0 || n > out[len(out)-1]) {
			out = append(out, n)
		}
	}
	return out
}

// wakeups measures the wakeup source with 10k, 100k and then `max` records
// pending (due two hours or more ahead, 36 ms apart; loaded into etcd, see
// loadWakeups), today's windowed source against the one at baseline (up to
// beforeMax records: it holds them all): RSS once it has listed them and
// delivered 1000 probe records due over 10 s (100/s), and how late those
// probes fired.
func (e *env) wakeups(ctx context.Context, r *report, max int) error {
	bins := map[string]string{"window": filepath.Join(e.dir, "wakeup-source"), "before": filepath.Join(e.dir, "wakeup-source-before"),
		"paged": filepath.Join(e.dir, "wakeup-source-paged")}
	if out, err := buildCmd("", bins["window"], "./cmd/wakeup-source").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/wakeup-source: %v\n%s", err, out)
	}
	pagedSrc := filepath.Join(e.dir, "paged-src")
	if out, err := exec.Command("bash", "-c", fmt.Sprintf("mkdir -p %s && git archive %s | tar -x -C %s", pagedSrc, pagedStart, pagedSrc)).CombinedOutput(); err != nil {
		return fmt.Errorf("the source at %s (git archive): %v\n%s", pagedStart[:7], err, out)
	}
	buildPaged := buildCmd("", bins["paged"], "./cmd/wakeup-source")
	buildPaged.Dir = pagedSrc
	if out, err := buildPaged.CombinedOutput(); err != nil {
		return fmt.Errorf("building the wakeup source at %s: %v\n%s", pagedStart[:7], err, out)
	}
	build := buildCmd("", bins["before"], "./cmd/wakeup-source") // the source that held an entry per record
	build.Dir = filepath.Join(e.dir, "baseline-src")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the wakeup source at %s: %v\n%s", baseline[:7], err, out)
	}
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wakeupNS}}); err != nil {
		return err
	}
	sink := &probeSink{arrived: map[string]time.Time{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: sink, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	sinkURL := "http://" + l.Addr().String()

	type row struct {
		pending            int
		variant            string
		rss, peak          float64
		ready              time.Duration
		cpu                [3]float64 // CPU seconds from exec to ready: etcd, kube-apiserver, the source
		p50, p99, maxLate  time.Duration
		delivered, ofProbe int
	}
	var rows []row
	far := time.Now().Add(2 * time.Hour)
	created := 0
	run := 0
	var loads []string
	for _, n := range wakeupCounts(max) {
		fmt.Printf("  wakeups: %d pending ...\n", n)
		t0 := time.Now()
		if err := e.loadWakeups(ctx, created, n, sinkURL, func(i int) time.Time { return far.Add(time.Duration(i) * 36 * time.Millisecond) }, "p"); err != nil {
			return err
		}
		took := time.Since(t0).Round(time.Second)
		fmt.Printf("    loaded %d in %s\n", n-created, took)
		loads = append(loads, fmt.Sprintf("%d in %s", n-created, took))
		created = n
		for _, v := range []string{"before", "paged", "paged 5000", "window"} {
			if (v == "before" && n > beforeMax) || (v != "window" && n > pagedMax) {
				continue
			}
			run++
			bin, args := bins[v], []string(nil)
			if v == "paged 5000" { // today's source, started by lists of 5000
				bin, args = bins["window"], []string{"--paged-start", "--page-size", "5000"}
			}
			res, err := e.wakeupRun(ctx, bin, args, sink, sinkURL, run)
			if err != nil {
				return fmt.Errorf("wakeup source %s with %d pending: %w", v, n, err)
			}
			rows = append(rows, row{pending: n, variant: v, rss: res.rss, peak: res.peak, ready: res.ready, cpu: res.cpu,
				p50: res.late[len(res.late)/2], p99: res.late[len(res.late)*99/100], maxLate: res.late[len(res.late)-1],
				delivered: len(res.late), ofProbe: probes})
			fmt.Printf("    %s: RSS %.1f MiB (peak %.1f), ready after %s (CPU s etcd %.1f, kube-apiserver %.1f, source %.1f), probes late p99 %s\n", v, res.rss, res.peak, res.ready.Round(time.Millisecond),
				res.cpu[0], res.cpu[1], res.cpu[2], res.late[len(res.late)*99/100])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Records pending in namespace %s, due from 2 hours ahead on, 36 ms apart (1M: over 10 hours); `cmd/wakeup-source --operator bench --concurrency 16` started against them. "+
		"The records are loaded into etcd as the API server stores them (two created through the API, the rest rendered from the first one's stored bytes and checked against the second's; "+
		"then counted by a paginated list and sampled by GET through the API server; `loadWakeups` in bench/suite/wakeupload.go): loaded %s. "+
		"Once it is ready (it has listed them) it delivers %d probe records due over 10 s (100/s, created after it is ready) to an in-process sink. "+
		"RSS (VmRSS) when the probes are delivered and peak (VmHWM), MiB; lateness of the probes (arrival - due). One run per cell. "+
		"Before: the source at %s, which held an entry per record (a reflector's full list); paged: the windowed source at %s, which listed every record at start in pages of 500; "+
		"paged 5000: today's source with --paged-start --page-size 5000; the paged starts are not run above %d pending; window: today's, which holds at most --window (10000) records and starts from a watch's initial events (sendInitialEvents); the source before is not run above %d pending (it would hold every record: over 1 GiB at 1M). "+
		"CPU: seconds of CPU (utime+stime from /proc) that etcd, kube-apiserver and the source used from exec to ready.\n\n",
		wakeupNS, strings.Join(loads, ", then "), probes, baseline[:7], pagedStart[:7], pagedMax, beforeMax)
	b.WriteString("| pending | source | RSS | peak RSS | exec -> ready | CPU etcd / apiserver / source | fire lateness p50 | p99 | max |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range rows {
		fmt.Fprintf(&b, "| %d | %s | %.1f | %.1f | %s | %.1f / %.1f / %.1f | %s | %s | %s |\n", w.pending, w.variant, w.rss, w.peak,
			w.ready.Round(10*time.Millisecond), w.cpu[0], w.cpu[1], w.cpu[2], w.p50.Round(100*time.Microsecond), w.p99.Round(100*time.Microsecond), w.maxLate.Round(100*time.Microsecond))
	}
	byKey := map[string]row{}
	for _, w := range rows {
		byKey[fmt.Sprint(w.pending, w.variant)] = w
	}
	for _, n := range wakeupCounts(max) {
		if a, c := byKey[fmt.Sprint(n, "window")], byKey[fmt.Sprint(n, "before")]; c.rss > 0 {
			fmt.Fprintf(&b, "\nAt %d pending the windowed source is at **%.2fx** the RSS of the one before (%.1f against %.1f MiB).\n", n, a.rss/c.rss, a.rss, c.rss)
		}
		if a, p, p5 := byKey[fmt.Sprint(n, "window")], byKey[fmt.Sprint(n, "paged")], byKey[fmt.Sprint(n, "paged 5000")]; p.ready > 0 {
			fmt.Fprintf(&b, "\nAt %d pending, exec -> ready against the paged start (pages of 500): initial events **%.3fx**, pages of 5000 **%.3fx** (%s, %s against %s; peak RSS %.1f, %.1f against %.1f MiB).\n",
				n, float64(a.ready)/float64(p.ready), float64(p5.ready)/float64(p.ready), a.ready.Round(10*time.Millisecond), p5.ready.Round(10*time.Millisecond), p.ready.Round(10*time.Millisecond), a.peak, p5.peak, p.peak)
		}
	}
	r.add("Wakeup source", b.String())
	for _, w := range rows {
		if w.variant == "window" {
			r.fig(fmt.Sprintf("wk-rss-%d", w.pending), w.rss)
			r.fig(fmt.Sprintf("wk-p99-%d", w.pending), float64(w.p99)/float64(time.Millisecond))
		} else {
			r.fig(fmt.Sprintf("wk-rss-before-%d", w.pending), w.rss)
		}
	}
	if w, ok := byKey[fmt.Sprint(max, "window")]; ok {
		r.fig("wk-ready", w.ready.Seconds())
		if p, ok := byKey[fmt.Sprint(max, "paged")]; ok {
			r.fig("wk-ready-paged", p.ready.Seconds())
		}
		r.fig("wk-pending", float64(max))
		r.fig("wk-rss", w.rss)
		r.fig("wk-peak", w.peak)
		r.fig("wk-p99", float64(w.p99)/float64(time.Millisecond))
	}
	return nil
}

// createWakeups creates records [from, to) of operator bench, labeled as
// the Store labels them, due at due(i), named <prefix><i>.
func (e *env) createWakeups(ctx context.Context, from, to int, sink string, due func(int) time.Time, prefix string) error {
	return forEach(ctx, 32, from, to, func(ctx context.Context, i int) error {
		d := due(i)
		name := fmt.Sprintf("%s%07d", prefix, i)
		wk := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: wakeupNS, Name: name,
			Labels: map[string]string{wakeup.OperatorLabel: "bench", wakeup.DueBucketLabel: wakeup.DueBucket(d)}},
			Spec: v1alpha1.WakeupSpec{Operator: "bench", Sink: sink, Due: metav1.NewMicroTime(d), Reason: v1alpha1.ReasonRequeueAfter,
				Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: wakeupNS, Name: name}}}
		return e.c.Create(ctx, wk)
	})
}

type wakeupResult struct {
	rss, peak float64
	ready     time.Duration
	cpu       [3]float64      // CPU seconds from exec to ready: etcd, kube-apiserver, the source
	late      []time.Duration // sorted
}

// wakeupRun starts one source, waits until it is ready, has it deliver
// the probes and measures it.
func (e *env) wakeupRun(ctx context.Context, bin string, args []string, sink *probeSink, sinkURL string, run int) (wakeupResult, error) {
	port, err := freePort()
	if err != nil {
		return wakeupResult{}, err
	}
	cmd := exec.Command(bin, append([]string{"--namespace", wakeupNS, "--operator", "bench", "--concurrency", "16", "--health-addr", fmt.Sprintf("127.0.0.1:%d", port)}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cpu0 := [2]float64{cpuSeconds(e.planePID["etcd"]), cpuSeconds(e.planePID["kube-apiserver"])}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return wakeupResult{}, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	var res wakeupResult
	for {
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port)); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				res.ready = time.Since(t0)
				res.cpu = [3]float64{cpuSeconds(e.planePID["etcd"]) - cpu0[0], cpuSeconds(e.planePID["kube-apiserver"]) - cpu0[1], cpuSeconds(cmd.Process.Pid)}
				break
			}
		}
		if time.Since(t0) > 10*time.Minute {
			return res, fmt.Errorf("not ready after 10 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	prefix := fmt.Sprintf("probe%d-", run)
	start := time.Now().Add(20 * time.Second)
	due := func(i int) time.Time { return start.Add(time.Duration(i) * 10 * time.Millisecond) }
	sink.expect(prefix, probes, due)
	if err := e.createWakeups(ctx, 0, probes, sinkURL, due, prefix); err != nil {
		return res, err
	}
	if time.Now().After(start) {
		return res, fmt.Errorf("creating the probes took longer than 20 s")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !sink.done() {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("probes not all delivered within 2 minutes of their due time")
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := rssMiB(cmd.Process.Pid)
	res.rss, res.peak = m.total, peakMiB(cmd.Process.Pid)
	res.late = sink.lateness()
	return res, nil
}

// cpuSeconds is the CPU time process pid has used (utime + stime).
func cpuSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	c, err := proc.CPU(pid)
	if err != nil {
		return 0
	}
	return c.Seconds()
}

func peakMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// probeSink records when each expected probe first arrives.
type probeSink struct {
	mu      sync.Mutex
	due     map[string]time.Time
	arrived map[string]time.Time
}

func (p *probeSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, now := r.Header.Get("Ce-Targetname"), time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.due[name]; ok {
		if _, seen := p.arrived[name]; !seen {
			p.arrived[name] = now
		}
	}
}

func (p *probeSink) expect(prefix string, n int, due func(int) time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.due, p.arrived = map[string]time.Time{}, map[string]time.Time{}
	for i := 0; i < n; i++ {
		p.due[fmt.Sprintf("%s%07d", prefix, i)] = due(i)
	}
}

func (p *probeSink) done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.arrived) == len(p.due)
}

func (p *probeSink) lateness() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var late []time.Duration
	for name, at := range p.arrived {
		late = append(late, at.Sub(p.due[name]))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	return late
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
