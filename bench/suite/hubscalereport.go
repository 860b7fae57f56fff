package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

func sortDurations(ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// quantile of sorted ds (0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// section is the part's report.
func (res *hsResult) section() string {
	p := res.p
	var b strings.Builder
	kinds := map[hsKind]int{}
	for i := range p.ops {
		kinds[p.kind(i)]++
	}
	cmd := "`go run ./bench/suite -only hubscale` (`make bench-hubscale`)"
	if p.ops != 100 || p.objects != 100_000 || hubscaleChanges != 5000 || hubscaleRate != 100 || hubscaleReplicas != 1 || hubscaleSettle != 30*time.Second {
		cmd = fmt.Sprintf("`go run ./bench/suite -only hubscale -hubscale-ops %d -hubscale-objects %d -hubscale-changes %d -hubscale-rate %g -hubscale-settle %s", p.ops, p.objects, hubscaleChanges, hubscaleRate, hubscaleSettle)
		if hubscaleReplicas != 1 {
			cmd += fmt.Sprintf(" -hubscale-replicas %d -hubscale-hub-args '%s'", hubscaleReplicas, hubscaleHubArgs)
		}
		cmd += "`"
	}
	fmt.Fprintf(&b, "Printed by %s on %s, %d CPUs; the 1-minute load average was %s when the part began, %s when its stream began and %s when it ended (other work shared the machine).\n\n",
		cmd, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), res.load[0], res.load[1], res.load[2])
	fmt.Fprintf(&b, "On a control plane of the part's own (kube-apiserver and etcd, no controller-manager): **%d Subscriptions** in %d namespaces, one operator each, and **%d ConfigMaps** of 1 KiB spread evenly over those namespaces (created with 64 at a time in %s). The operators (bench/suite/hubscaleplan.go): %d configwatcher (ConfigWatchers of their namespace in Resource mode with skipObserved, and ConfigMaps in Reference mode with referencedBy ConfigWatcher spec.configMap, as `opzero manifests --source=hub` writes it; %d ConfigWatchers each), %d hot (Resource mode, their namespace, `tier=hot`: 1 ConfigMap in 10), %d team (Reference mode, every namespace, `team=t<k>`: 1 ConfigMap in 20 carries one of %d teams), %d all (Resource mode, every ConfigMap of their namespace); each with an hourly sweep and wakeups. Each sink is an HTTP receiver in the suite's process behind the operators' own authentication (internal/auth: the hub's TokenRequest token for the sink's audience checked by a TokenReview, cached; only the hub's service account allowed); it records when each event arrives and answers 202, nothing reconciles. The hub (`cmd/opzero-hub`, %d replica(s), admin credentials, `--service-account %s`) starts after the Subscriptions exist: every one was Ready %s after its start, with %.0f shared watches open.\n\n",
		p.ops, p.ops, p.objects, res.created.Round(time.Second), kinds[hsConfigWatcher], p.cwPer(), kinds[hsHot], kinds[hsTeam], p.teams(), kinds[hsAll], hubscaleReplicas, hsHubSA, res.ready.Round(10*time.Millisecond), res.watches)

	b.WriteString("Hub memory from /proc/<pid>/status, MiB (every replica summed):\n\n| when | RSS (VmRSS) | anonymous (RssAnon) | file-backed (RssFile) | peak (VmHWM) |\n|---|---|---|---|---|\n")
	worst, peak := 0.0, 0.0
	for _, pt := range res.points {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.1f |\n", pt.what, pt.mem.rss, pt.mem.anon, pt.mem.file, pt.mem.hwm)
		worst, peak = max(worst, pt.mem.rss), max(peak, pt.mem.hwm)
	}
	perReplica := worst / float64(hubscaleReplicas)
	fmt.Fprintf(&b, "\nGoal: at most 64 MiB RSS per hub replica: **%s** (largest RSS read %.1f MiB per replica; the peak, VmHWM, %.1f). kube-apiserver's RSS after the stream, for scale: %.0f MiB.\n\n",
		map[bool]string{true: "met", false: "missed"}[perReplica <= 64], perReplica, peak/float64(hubscaleReplicas), res.apiserverRSS)

	ok := 0
	var call []time.Duration
	for _, c := range res.changes {
		if c.err == nil {
			ok++
			call = append(call, c.ret.Sub(c.t0))
		}
	}
	sortDurations(call)
	fmt.Fprintf(&b, "The stream: %d changes (a JSON merge PATCH of one ConfigMap writing the time, Unix ns, into data.t just before the call), asked at %.0f a second and sent at %.0f (%s; at most 256 PATCHes wait for their answer at once), round-robin over the operators, each change of an object its operator subscribes to (%d deliveries expected: an object may be subscribed by two operators), after one warm-up change per operator that is not measured (a fresh hub's first delivery to a sink fetches its token and dials; the sink's first TokenReview). Latency from that timestamp to the event's arrival, ms; the API server's own watch latency is plain client-go watches in the suite (full objects in JSON, as the hub's Resource-mode watches; each set on a connection of its own), in the same run on the same changes: one watch per namespace, and one watch of every ConfigMap:\n\n",
		ok, hubscaleRate, float64(ok)/res.streamTook.Seconds(), res.streamTook.Round(100*time.Millisecond), res.expected)
	b.WriteString("| change -> seen | events | p50 | p90 | p99 | max | not seen |\n|---|---|---|---|---|---|---|\n")
	row := func(what string, ds []time.Duration, missing any) {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %v |\n", what, len(ds), ms(quantile(ds, .5)), ms(quantile(ds, .9)), ms(quantile(ds, .99)), ms(quantile(ds, 1)), missing)
	}
	row(fmt.Sprintf("API server watch, one per namespace (%d streams on one connection)", p.ops), res.nsLat, res.nsMissing)
	row("API server watch, one of every ConfigMap (one stream)", res.watchLat, res.watchMissing)
	row("**hub delivery**, every Subscription", res.hubLat, res.hubMissing)
	row("hub delivery, Resource mode (hot, all)", res.resLat, "-")
	row("hub delivery, Reference mode (configwatcher's referencedBy, team)", res.refLat, "-")
	row("the PATCH call itself (timestamp -> answer)", call, 0)
	row("hub delivery - the per-namespace watch's event of the same change (what the hub adds; negative: the hub was first)", res.nsBehind, "-")
	row("hub delivery - the one watch's event of the same change", res.behind, "-")
	r50, r99 := ratio(quantile(res.hubLat, .5), quantile(res.nsLat, .5)), ratio(quantile(res.hubLat, .99), quantile(res.nsLat, .99))
	a50, a99 := ratio(quantile(res.hubLat, .5), quantile(res.watchLat, .5)), ratio(quantile(res.hubLat, .99), quantile(res.watchLat, .99))
	fmt.Fprintf(&b, "\n**Delivery / watch per namespace: p50 %.2fx, p99 %.2fx** (delivery / the one watch of every ConfigMap: p50 %.2fx, p99 %.2fx). What the hub adds to the watch is its decode, filters, the CloudEvent and the HTTP POST to the sink (the sink's TokenReview is cached after the first).\n\n", r50, r99, a50, a99)

	cpu := func(name string) float64 { return res.cpu[name].Seconds() * 1000 }
	window := res.streamTook + res.drainTook
	fmt.Fprintf(&b, "CPU (utime+stime from /proc/<pid>/stat) from the first change to the last arrival (%s): **hub %.0f ms, %.0f ms per 1000 changes** (%.0f per 1000 deliveries); kube-apiserver %.0f ms (%.0f per 1000 changes), etcd %.0f ms, the suite (PATCHes, the watch, %d sinks with their authentication) %.0f ms.\n\n",
		window.Round(100*time.Millisecond), cpu("hub"), cpu("hub")/float64(ok)*1000, cpu("hub")/float64(max(1, len(res.hubLat)))*1000, cpu("kube-apiserver"), cpu("kube-apiserver")/float64(ok)*1000, cpu("etcd"), p.ops, cpu("suite"))

	idle := float64(res.idleCPU) / float64(hubscaleSettle) // ms of CPU per ms, without changes
	idleAfter := float64(res.idleAfter) / float64(hsTrimWait)
	net := cpu("hub") - idle*float64(window.Milliseconds())
	fmt.Fprintf(&b, "Without changes the hub is not idle: it used %.1f ms of CPU a second over the %s settle time after the initial sync and %.1f ms a second over the %s after the stream (watch bookmarks, progress written to status, the wakeup source, the trim). Less the first rate over the stream's window, **%.0f ms per 1000 changes** are the changes' own.\n\n",
		idle*1000, hubscaleSettle, idleAfter*1000, hsTrimWait, net/float64(ok)*1000)
	m := res.metrics
	fmt.Fprintf(&b, "The hub's counters at the end (/metrics): %.0f events sent, %.0f changes filtered (referencedBy, skipObserved), %.0f coalesced, %.0f retries, %.0f dropped, %.0f relists, %.0f sweeps, %.0f wakeups; %.0f watches, %.0f referrer indexes with a watch of their own. The sinks refused %d deliveries (401/403) and took %s besides the updates.\n",
		m["events_sent_total"], m["events_filtered_total"], m["events_coalesced_total"], m["retries_total"], m["events_dropped_total"], m["relists_total"], m["sweeps_total"], m["wakeups_total"], m["watches"], m["index_watches"], res.refused, otherEvents(res.other))
	return b.String()
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func otherEvents(m map[string]int) string {
	if len(m) == 0 {
		return "no other event"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// writeCSV writes each change's figures (-hubscale-csv): its object, t0,
// the PATCH's answer, the watches' and every delivery's latency, ms (-1:
// none).
func (res *hsResult) writeCSV(file string) error {
	var b strings.Builder
	b.WriteString("change,namespace,name,t0_unix_ns,patch_ms,watch_all_ms,watch_ns_ms,deliveries\n")
	f := func(d time.Duration) string {
		if d < 0 {
			return "-1"
		}
		return ms(d)
	}
	for k, c := range res.changes {
		var dl []string
		for i := range res.hubSeen {
			if d := res.hubSeen[i][k]; d >= 0 {
				dl = append(dl, fmt.Sprintf("%s:%s", hsNamespace(i), ms(d)))
			}
		}
		fmt.Fprintf(&b, "%d,%s,%s,%d,%s,%s,%s,%s\n", k, hsNamespace(c.obj.n), hsCMName(c.obj.j), c.t0.UnixNano(), ms(c.ret.Sub(c.t0)), f(res.watchSeen[k]), f(res.nsSeen[k]), strings.Join(dl, " "))
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
