package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

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
		b.WriteString("\n\"opzero serverless\" is the example's default build, serverless only (its main does not import `operator/classic`: controller-runtime's manager is not linked and `--mode=classic` is refused), which trims once after its first answer (internal/trim: once idle for 100 ms, the heap's garbage is returned and the binary's code and read-only pages are unmapped; what the next events run is mapped again); \"no trim\" is the same binary with `OPZERO_TRIM=off`; \"classic linked\" is the example built with `-tags opzero_classic`, whose classic.go imports `operator/classic`, run serverless with `OPZERO_TRIM=off` (classic mode linked and no trim: the build both savings are measured against), and \"opzero classic\" that binary run `--mode=classic`. The RSS right after the first reconcile is read 0.5 s after it, so after the trim: the steady-state table is the figure to read, and the ratios in the first table compare the default build with the trim off (a snapshot of the trimmed process would flatter it).\n")
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
