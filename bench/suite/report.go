package main

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// report is what a run measured: the sections in the order they ran, and
// the figures the goals table and the plots read.
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
// The text is analysis.md, the report's "Reading the figures" part, kept as
// Markdown beside the suite; the wakeup source's hand-measured section follows it.
var analysis = analysisText + wakeupSourceSection

//go:embed analysis.md
var analysisText string

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
