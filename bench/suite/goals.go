package main

import (
	"cmp"
	"fmt"
	"strings"
)

// fig records a figure for the goals table.
func (r *report) fig(name string, v float64) { r.figs[name] = v }

// goals is the table of issue 16's goals, each against this run's figure
// (a ratio within the run where the goal is one).
func (r *report) goals() string {
	type goal struct {
		what, unit string
		figs       []string // the first is compared with want
		want       float64
		atMost     bool
	}
	gs := []goal{
		{"converge 2000 objects, the wiring `opzero manifests ... -- --answer=admitted --event-cache` generates (one ApiServerSource per kind, the Service with those arguments): x controller-runtime (x raw limit; the default answer after the reconcile, one source: x controller-runtime)", "x", []string{"tp-opzero-admitted-cr", "tp-opzero-admitted-raw", "tp-opzero-cr"}, 1.2, false},
		{"the same with 4 ConfigWatcher sources: x controller-runtime (the default answer, 4 sources)", "x", []string{"tp-opzero-admitted-4src-cr", "tp-opzero-4src-cr"}, 1.5, false},
		{fmt.Sprintf("wakeup source with %s pending: RSS MiB (peak, fire lateness p99 ms; at 100k: RSS, p99, the source before that held every record)", count(cmp.Or(r.figs["wk-pending"], float64(wakeupsPending)))), "MiB", []string{"wk-rss", "wk-peak", "wk-p99", "wk-rss-100000", "wk-p99-100000", "wk-rss-before-100000"}, 40, true},
		{"Lease writes per reconcile, max-scale > 1, a steady stream, 4 instances, Leases kept while warm and events forwarded to the holder (kept, holder's Lease marked: the engine before forwarding; released after each reconcile)", "", []string{"ls-4-true", "ls-4-mark", "ls-4-false"}, 1.0, true},
		{"4 instances, 50 ms external call: x one instance, Resource-mode events as the generated wiring sends (Reference mode, the reconcile GETs the object: x one instance)", "x", []string{"so-4x", "so-4x-ref"}, 3.7, false},
		{"serverless RSS, default build (serverless only), largest median over 0-10000 ConfigMaps, after the first reconcile or after 200 more, MiB (after the first, after 200 more; classic linked, no trim, after the first)", "MiB", []string{"rss-default", "rss-first", "rss-steady", "rss-linked"}, 24, true},
		{"cold start, event at zero -> reconciled through `opzero dev`'s activator, ms (with a TokenReview; classic linked)", "ms", []string{"cold-activator-0", "cold-activator-1", "cold-activator-2"}, 40, true},
	}
	figs := map[string]float64{}
	for k, v := range r.figs {
		figs[k] = v
	}
	separate := false
	if _, ok := figs["wk-rss"]; !ok && len(wakeupSeparate) > 0 { // the full run did not reach the wakeup part
		for k, v := range wakeupSeparate {
			figs[k] = v
		}
		separate = true
	}
	var b strings.Builder
	b.WriteString("## Goals\n\nEach goal against this run's figures (the sections below have the detail and the method). The first figure is the one the goal is about; the others, in parentheses, are for context.\n\n| goal | this run | target | met |\n|---|---|---|---|\n")
	for _, g := range gs {
		v, ok := figs[g.figs[0]]
		if !ok {
			fmt.Fprintf(&b, "| %s | not measured | %s %.4g | - |\n", g.what, map[bool]string{true: "<=", false: ">="}[g.atMost], g.want)
			continue
		}
		var rest []string
		for _, f := range g.figs[1:] {
			if x, ok := figs[f]; ok {
				rest = append(rest, fmt.Sprintf("%.2f", x))
			}
		}
		val := fmt.Sprintf("%.2f", v)
		if len(rest) > 0 {
			val += " (" + strings.Join(rest, ", ") + ")"
		}
		met := v >= g.want
		if g.atMost {
			met = v <= g.want
		}
		if g.figs[0] == "wk-rss" { // RSS and p99, at 100k and at the largest count
			rss100k, ok := figs["wk-rss-100000"]
			met = met && figs["wk-p99"] <= 100 && ok && rss100k <= g.want && figs["wk-p99-100000"] <= 100
		}
		if g.figs[0] == "tp-opzero-admitted-cr" {
			met = met && figs["tp-opzero-admitted-raw"] >= 0.6
		}
		fmt.Fprintf(&b, "| %s | %s | %s %.4g%s | %s |\n", g.what, val, map[bool]string{true: "<=", false: ">="}[g.atMost], g.want, extraTarget(g.figs[0]), map[bool]string{true: "yes", false: "**no**"}[met])
	}
	if separate {
		fmt.Fprintf(&b, "\nThe wakeup source's figures are from a separate run (%s), not this one: see \"The wakeup source, measured separately\".\n", wakeupSeparateRun)
	}
	b.WriteString("\n")
	return b.String()
}

// count is n as 100k or 1M.
func count(n float64) string {
	switch {
	case n >= 1e6 && int(n)%1_000_000 == 0:
		return fmt.Sprintf("%dM", int(n)/1_000_000)
	case n >= 1e3 && int(n)%1000 == 0:
		return fmt.Sprintf("%dk", int(n)/1000)
	}
	return fmt.Sprint(int(n))
}

func extraTarget(fig string) string {
	switch fig {
	case "wk-rss":
		return "; p99 <= 100; the same at 100k"
	case "tp-opzero-admitted-cr":
		return "; >= 0.6 of raw"
	}
	return ""
}

// wakeupSeparate are the goals table's wakeup figures from a separate
// `go run ./bench/suite -only wakeup` (wakeupSeparateRun), used when a full
// run stops before its wakeup part, with that run's "Wakeup source" section
// (wakeupSeparateSection). Empty: none (the full run loads its records
// into etcd in minutes, see loadWakeups, and measures them itself).
var wakeupSeparate map[string]float64

const (
	wakeupSeparateRun     = ""
	wakeupSeparateSection = ""
)
