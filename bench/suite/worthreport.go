package main

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
)

const worthTitle = "Is serverless worth it?"

// total is a wiring's summed RSS and peak at ops operators and n objects;
// ok false if the row was not measured.
func (w *worthPart) total(wiring string, ops, n int) (rss, hwm float64, ok bool) {
	procs, ok := w.mem[wiring][ops][n]
	if !ok {
		return 0, 0, false
	}
	rss, hwm = sumMem(procs, nil)
	return rss, hwm, true
}

// cell is a wiring's row: RSS (peak), with the per-operator and shared
// split for the serverless wirings.
func (w *worthPart) cell(wiring string, ops, n int) string {
	rss, hwm, ok := w.total(wiring, ops, n)
	if !ok {
		return "-"
	}
	s := fmt.Sprintf("%.1f (%.1f)", rss, hwm)
	if wiring == wKnative || wiring == wHub {
		per, _ := sumMem(w.mem[wiring][ops][n], func(p procMem) bool { return !p.shared })
		shared, _ := sumMem(w.mem[wiring][ops][n], func(p procMem) bool { return p.shared })
		s += fmt.Sprintf(" = %.1f per-operator + %.1f shared", per, shared)
	}
	return s
}

func (w *worthPart) ratio(a, b string, ops, n int) string {
	x, _, okx := w.total(a, ops, n)
	y, _, oky := w.total(b, ops, n)
	if !okx || !oky || y == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x/y)
}

// section is the part's text for docs/benchmarks.md.
func (w *worthPart) section(counts []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "What a deployment keeps running while its operator is at zero, against the same reconciler on controller-runtime, measured side by side in one run on a control plane of the part's own (`go run ./bench/suite -only worth`). Objects: 1 KiB ConfigMaps (the watched kind) spread over %d namespaces that hold no ConfigWatcher, added row by row (%s). Operator k lives in namespace wo-k with one idle ConfigWatcher (and the ConfigMap it names); %d operators are ten ConfigWatcher operators in ten namespaces, the same binary and manifests with another `--namespace`. ", worthCMNS, worthObjects, worthOps)
	b.WriteString("Serverless wirings: `opzero manifests --operator ./examples/configwatcher --namespace wo-k` (the default, the hub wiring) and the same with `--source=knative` (Knative wiring: one ApiServerSource per kind, ConfigWatcher in Resource mode and ConfigMap in Reference mode, both watching every namespace, a wakeup source, PingSources), the operators' manifests joined and run by one `opzero dev -f` as a user would (Knative's real adapters, one mtping for the cluster, ko:// Deployments as local processes). Always-on processes are found under opzero dev by /proc (cmdline, and the adapters' environment naming their source); operator instances are not counted (the operator is at zero). The hub wiring counts both hub replicas the manifests deploy (`replicas: 2`): opzero dev runs one process per Deployment, so the part starts the second beside it once the Subscriptions are Ready (the same binary, flags and environment, its own POD_NAME and ports); the first holds every bucket, the second is the standby. The ko:// images are built with CGO_ENABLED=0, as ko builds them (and as crbaseline is built). ")
	fmt.Fprintf(&b, "controller-runtime: `bench/crbaseline`, one manager process per operator, caching ConfigWatchers and ConfigMaps of every namespace (as the generated sources watch); \"metadata-only\" is its `-metadata-only` variant, the best a careful classic author does: the ConfigMap watch with `builder.OnlyMetadata` and ConfigMaps read from the API server (`client.CacheOptions.DisableFor`), so no full ConfigMap is cached. RSS is VmRSS from /proc %s after ready (managers: caches synced; opzero dev: every adapter has listed), peak is VmHWM; MiB, one run; ratios within this run.\n\n", worthSettle)
	for _, ops := range []int{1, worthOps} {
		fmt.Fprintf(&b, "**%d operator(s)**, RSS (peak), MiB, every always-on process summed:\n\n", ops)
		b.WriteString("| ConfigMaps | controller-runtime | controller-runtime, metadata-only | Knative wiring | hub wiring | Knative / controller-runtime | hub / controller-runtime | Knative / metadata-only | hub / metadata-only |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, n := range counts {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, w.cell(wCR, ops, n), w.cell(wCRMeta, ops, n), w.cell(wKnative, ops, n), w.cell(wHub, ops, n),
				w.ratio(wKnative, wCR, ops, n), w.ratio(wHub, wCR, ops, n), w.ratio(wKnative, wCRMeta, ops, n), w.ratio(wHub, wCRMeta, ops, n))
		}
		b.WriteString("\n")
	}
	for _, wiring := range []string{wKnative, wHub} {
		w.processTable(&b, wiring, counts)
	}
	b.WriteString("![Always-on RSS against ConfigMaps, one operator](bench-worth.svg)\n\n")
	for _, s := range []string{wKnative, wHub} {
		for _, c := range []string{wCR, wCRMeta} {
			fmt.Fprintf(&b, "- %s against %s, one operator: %s.\n", s, c, w.crossoverText(s, c, counts))
		}
	}
	b.WriteString("\n")
	w.churnTable(&b)
	var notes []string
	for _, wiring := range worthWirings {
		for _, ops := range []int{1, worthOps} {
			for _, n := range counts {
				if note := w.notes[wiring][ops][n]; note != "" && !contains(notes, note) {
					notes = append(notes, note)
				}
			}
		}
	}
	if w.churnNote != "" {
		notes = append(notes, w.churnNote)
	}
	if len(notes) > 0 {
		b.WriteString("\nNot measured in this run: " + strings.Join(notes, "; ") + ".\n")
	}
	return b.String()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// processTable lists a serverless wiring's always-on processes for one
// operator, and for ten the mean per process of each kind.
func (w *worthPart) processTable(b *strings.Builder, wiring string, counts []int) {
	var whats []string
	for _, byN := range w.mem[wiring] {
		for _, procs := range byN {
			for _, p := range procs {
				if !contains(whats, p.what) {
					whats = append(whats, p.what)
				}
			}
		}
	}
	if len(whats) == 0 {
		return
	}
	sort.Strings(whats)
	fmt.Fprintf(b, "%s, each always-on process, RSS (peak), MiB; with %d operators the processes of each kind summed (how many):\n\n| operators | ConfigMaps |", wiring, worthOps)
	for _, what := range whats {
		fmt.Fprintf(b, " %s |", what+sharedMark(w.mem[wiring], what))
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(whats)) + "\n")
	for _, ops := range []int{1, worthOps} {
		for _, n := range counts {
			procs, ok := w.mem[wiring][ops][n]
			if !ok {
				continue
			}
			fmt.Fprintf(b, "| %d | %d |", ops, n)
			for _, what := range whats {
				k := 0
				rss, hwm := sumMem(procs, func(p procMem) bool {
					if p.what == what {
						k++
						return true
					}
					return false
				})
				switch {
				case k == 0:
					b.WriteString(" - |")
				case k == 1:
					fmt.Fprintf(b, " %.1f (%.1f) |", rss, hwm)
				default:
					fmt.Fprintf(b, " %.1f (%.1f) (%d) |", rss, hwm, k)
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}

func sharedMark(byOps map[int]map[int][]procMem, what string) string {
	for _, byN := range byOps {
		for _, procs := range byN {
			for _, p := range procs {
				if p.what == what && p.shared {
					return " (shared)"
				}
			}
		}
	}
	return ""
}

// crossover is the object count where serverless's always-on RSS meets
// classic's, linearly between the measured rows; ok false if it does not
// cross in the measured range.
func (w *worthPart) crossover(serverless, classic string, counts []int) (n float64, ok bool) {
	var prevN int
	var prevD float64
	have := false
	for _, c := range counts {
		s, _, ok1 := w.total(serverless, 1, c)
		k, _, ok2 := w.total(classic, 1, c)
		if !ok1 || !ok2 {
			continue
		}
		d := s - k
		if have && (prevD > 0) != (d > 0) {
			return float64(prevN) + float64(c-prevN)*prevD/(prevD-d), true
		}
		prevN, prevD, have = c, d, true
	}
	return 0, false
}

func (w *worthPart) crossoverText(serverless, classic string, counts []int) string {
	if n, ok := w.crossover(serverless, classic, counts); ok {
		return fmt.Sprintf("the always-on RSS lines cross at ~%.0f ConfigMaps (linear between rows)", n)
	}
	var first, last string
	for _, c := range counts {
		if r := w.ratio(serverless, classic, 1, c); r != "-" {
			if first == "" {
				first = r
			}
			last = r
		}
	}
	if first == "" {
		return "not measured"
	}
	return fmt.Sprintf("no crossover in the measured range (ratio %s at the fewest objects, %s at the most)", first, last)
}

// churnTable: instance time, cold starts and reconciles under churn that
// concerns no ConfigWatcher.
func (w *worthPart) churnTable(b *strings.Builder) {
	fmt.Fprintf(b, "**Instance time under unrelated churn**, one operator, its ConfigWatcher idle: %d updates/s of ConfigMaps in the wcm-N namespaces (no ConfigWatcher there, none names them) for %s, after the operator is at zero; opzero dev scales an idle operator to zero after %s (`--idle`, as `make demo`). From opzero dev's event stream (`--events=json`): the time with at least one operator instance running, instances started with none running (cold starts) and in all, deliveries the operator answered and keys its answers report reconciled. controller-runtime runs 100%% of the time by definition.\n\n", worthChurnHz, worthChurn, worthIdle)
	b.WriteString("| wiring | window | updates | time with an instance | cold starts | instance starts | deliveries | reconciles |\n|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(b, "| controller-runtime | - | - | 100%% (always on) | - | - | - | - |\n")
	for _, wiring := range []string{wKnative, wHub} {
		c, ok := w.churn[wiring]
		if !ok {
			fmt.Fprintf(b, "| %s | - | - | - | - | - | - | - |\n", wiring)
			continue
		}
		fmt.Fprintf(b, "| %s | %.0f s | %d | %.1f%% | %d | %d | %d | %d |\n", wiring, c.window.Seconds(), c.updates, 100*c.up.Seconds()/c.window.Seconds(), c.coldStarts, c.starts, c.deliveries, c.reconciles)
	}
}

// plot draws always-on RSS against ConfigMaps for one operator, one line
// per wiring, with each serverless wiring's crossover against
// controller-runtime marked; the x axis is square-root scaled so that the
// small counts stay apart.
func (w *worthPart) plot(counts []int) string {
	const wd, h, m = 720, 400, 60
	maxN, maxY := 1.0, 1.0
	for _, n := range counts {
		maxN = math.Max(maxN, float64(n))
		for _, wiring := range worthWirings {
			if _, hwm, ok := w.total(wiring, 1, n); ok {
				maxY = math.Max(maxY, hwm)
			}
		}
	}
	maxY *= 1.15
	x := func(n float64) float64 { return m + math.Sqrt(n/maxN)*(wd-2*m) }
	y := func(v float64) float64 { return h - m - v/maxY*(h-2*m) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", wd, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="24" font-size="14">Always-on RSS (MiB) of one operator against ConfigMaps (x: square root scale)</text>`+"\n", m)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", m, h-m, wd-m, h-m, m, m, m, h-m)
	for _, n := range counts {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%d</text>`+"\n", x(float64(n)), h-m+18, n)
	}
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%.0f</text><line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>`+"\n", m-6, y(v)+4, v, m, y(v), wd-m, y(v))
	}
	colors := map[string]string{wCR: "#d62728", wCRMeta: "#ff9896", wKnative: "#1f77b4", wHub: "#2ca02c"}
	ly := m
	for _, wiring := range worthWirings {
		var pts []string
		for _, n := range counts {
			if rss, _, ok := w.total(wiring, 1, n); ok {
				pts = append(pts, fmt.Sprintf("%.0f,%.0f", x(float64(n)), y(rss)))
			}
		}
		label := wiring
		if len(pts) == 0 {
			label += " (not measured)"
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[wiring], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", m+10, ly, colors[wiring], label)
		ly += 16
	}
	for _, s := range []string{wKnative, wHub} {
		if n, ok := w.crossover(s, wCR, counts); ok {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="%s" stroke-dasharray="4 3"/><text x="%.0f" y="%d" fill="%s" text-anchor="middle">%s = controller-runtime at ~%.0f</text>`+"\n",
				x(n), m, x(n), h-m, colors[s], x(n), ly+8, colors[s], s, n)
			ly += 16
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// mergeSection writes the section titled title into the report at out:
// in place of the section of that title if there is one, else before
// "Reading the figures"; every other part's figures are kept as they are.
func mergeSection(out, section string) error {
	old, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	s := string(old)
	head := section[:strings.IndexByte(section, '\n')+1] // "## title\n"
	if i := strings.Index(s, "\n"+head); i >= 0 {
		j := strings.Index(s[i+1+len(head):], "\n## ")
		end := len(s)
		if j >= 0 {
			end = i + 1 + len(head) + j
		}
		return os.WriteFile(out, []byte(s[:i+1]+strings.TrimRight(section, "\n")+"\n"+s[end:]), 0o644)
	}
	i := strings.Index(s, "\n## Reading the figures")
	if i < 0 {
		i = len(s)
	}
	return os.WriteFile(out, []byte(s[:i]+"\n"+strings.TrimRight(section, "\n")+"\n"+s[i:]), 0o644)
}
