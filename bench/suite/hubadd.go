package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opzero/opzero/internal/proc"
)

// The hubadd part ("One more unchanged operator on an existing hub"):
// what one more operator served at zero adds to the hub's memory. The
// fleet's unchanged operators (the ConfigWatcher built classic, `opzero
// hub adopt` of its release: ConfigMaps, Pods and ConfigWatchers in every
// namespace) on a control plane of their own with -hubadd-objects
// ConfigMaps and as many Secrets; the hub's RSS under opzero dev (the
// replica dev runs, which holds every bucket; no standby) with N operators
// and with N+1, and with N and one more that may also watch Secrets,
// which no other operator watches.

var (
	hubaddOps     = "1,5,9" // -hubadd-ops
	hubaddObjects = 10000   // -hubadd-objects
)

const (
	hubaddTitle = "One more unchanged operator on an existing hub"
	hubaddReads = 9               // VmRSS reads of the hub, their median reported
	hubaddEvery = 5 * time.Second // between the reads
)

func hubAdd(ctx context.Context, r *report, dir string) error {
	ns, err := parseCounts(hubaddOps)
	if err != nil {
		return err
	}
	if len(ns) == 0 || ns[0] < 1 || ns[len(ns)-1] >= worthOps {
		return fmt.Errorf("-hubadd-ops %q: want counts from 1 to %d", hubaddOps, worthOps-1)
	}
	os.Setenv("GOFLAGS", strings.TrimSpace(os.Getenv("GOFLAGS")+" -tags=opzero_classic")) // as fleet: the example's classic mode
	w, stop, err := hubPart(ctx, dir, "hubadd")
	if err != nil {
		return err
	}
	defer stop()
	hub, releases, adopted, err := w.fleetReleases(ctx)
	if err != nil {
		return err
	}
	// The new kind's operator: the last one's release, its ClusterRole
	// granting list and watch of Secrets too.
	last := ns[len(ns)-1]
	head := "  name: opzero:" + opNamespace(last) + ":configwatcher\nrules:\n"
	if !strings.Contains(releases[last], head) {
		return fmt.Errorf("hubadd: no ClusterRole opzero:%s:configwatcher in its release", opNamespace(last))
	}
	secretsRel := strings.Replace(releases[last], head, head+"- apiGroups:\n  - \"\"\n  resources:\n  - secrets\n  verbs:\n  - get\n  - list\n  - watch\n", 1)
	secretsSub, err := w.fleetAdopt(ctx, secretsRel)
	if err != nil {
		return err
	}
	if !strings.Contains(secretsSub, "kind: Secret\n") {
		return fmt.Errorf("hubadd: opzero hub adopt derived no Secrets from the release granting them:\n%s", secretsSub)
	}
	fmt.Printf("  hubadd: %d ConfigMaps and %d Secrets of 1 KiB ...\n", hubaddObjects, hubaddObjects)
	if err := w.ensureConfigMaps(ctx, hubaddObjects); err != nil {
		return err
	}
	payload := []byte(strings.Repeat("x", 1024))
	t := time.Now()
	if err := forEach(ctx, 32, 0, hubaddObjects, func(ctx context.Context, i int) error {
		return w.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%05d", i), Namespace: cmNamespace(i % worthCMNS)}, Data: map[string][]byte{"v": payload}})
	}); err != nil {
		return err
	}
	fmt.Printf("    created %d Secrets in %s\n", hubaddObjects, time.Since(t).Round(time.Second))

	// The sessions, operators only added from one to the next (no
	// Subscription left over), the Secrets one last: it replaces the
	// last one's Subscription.
	measure := func(name string, docs []string, ops int) (float64, []float64, error) {
		file := filepath.Join(w.dir, name+".yaml")
		if err := os.WriteFile(file, []byte(joinManifests(append([]string{hub}, docs...))), 0o644); err != nil {
			return 0, nil, err
		}
		return w.hubAddRSS(ctx, name, file, ops)
	}
	served := func(k int) []string { return append(slices.Clone(releases[:k]), adopted[:k]...) }
	rss := map[int]float64{}
	reads := map[int][]float64{}
	for _, n := range ns {
		for _, k := range []int{n, n + 1} {
			if _, ok := rss[k]; ok {
				continue
			}
			if rss[k], reads[k], err = measure(fmt.Sprintf("hubadd-%d", k), served(k), k); err != nil {
				return err
			}
		}
	}
	secrets, secretReads, err := measure(fmt.Sprintf("hubadd-%d-secrets", last+1), append(served(last), secretsRel, secretsSub), last+1)
	if err != nil {
		return err
	}

	var b strings.Builder
	fmt.Fprintf(&b, "The hub's memory, RSS under `opzero dev` (MiB), as unchanged operators are added, measured in one run (`go run ./bench/suite -only hubadd`) "+
		"on a control plane of its own with %d ConfigMaps and %d Secrets of 1 KiB over %d namespaces. The operators are the fleet's: the repo's ConfigWatcher "+
		"built classic, each in a namespace of its own, served at zero through its Deployment (`opzero hub adopt` of its release, idle after 5 s): "+
		"each watches ConfigMaps, Pods and ConfigWatchers in every namespace. Measured: the hub replica opzero dev runs, which holds every bucket "+
		"(no standby started), VmRSS, the median of %d reads %s apart from %s after every Subscription is Ready and every Deployment at 0 "+
		"replicas (-worth-settle); each row is a session of its own. Goal: one more operator on an existing hub adds at most 1 MiB at %d objects it watches.\n\n",
		hubaddObjects, hubaddObjects, worthCMNS, hubaddReads, hubaddEvery, worthSettle, hubaddObjects)
	b.WriteString("| operators served | the hub, N operators | the hub, N+1 | added by the one more | reads, N+1 (min-max) |\n|---|---|---|---|---|\n")
	for _, n := range ns {
		fmt.Fprintf(&b, "| %d -> %d | %.1f | %.1f | %+.2f | %.1f-%.1f |\n", n, n+1, rss[n], rss[n+1], rss[n+1]-rss[n], slices.Min(reads[n+1]), slices.Max(reads[n+1]))
	}
	fmt.Fprintf(&b, "| %d -> %d, the one more also watching Secrets (%d of them; no other operator watches Secrets) | %.1f | %.1f | %+.2f (%+.2f beside one more watching ConfigMaps only) | %.1f-%.1f |\n",
		last, last+1, hubaddObjects, rss[last], secrets, secrets-rss[last], secrets-rss[last+1], slices.Min(secretReads), slices.Max(secretReads))
	lo, hi := ns[0], last+1
	fmt.Fprintf(&b, "\nFrom %d to %d operators the hub grew %+.2f MiB, %+.2f MiB an operator: a single added operator's figure is within the spread of one session's reads (the last column).\n",
		lo, hi, rss[hi]-rss[lo], (rss[hi]-rss[lo])/float64(hi-lo))
	b.WriteString("\nWhy it is small: the hub keeps one watch per distinct resource, namespace, selector and form however many Subscriptions need it " +
		"(metadata only while every subscriber takes Reference mode) and streams the objects to the subscribers without storing them; " +
		"an added operator on kinds already watched adds its Subscription's state, one on a new kind adds one more watch, not its objects.\n")
	b.WriteString("\nNot measured here: the node's working set (kubelet's), the standby replica (it holds no bucket), and operators watching only some namespaces.\n")
	r.add(hubaddTitle, b.String())
	return nil
}

// hubAddRSS runs file's ops operators served at zero and returns the
// median of the serving hub replica's VmRSS reads, and the reads.
func (w *worthPart) hubAddRSS(ctx context.Context, name, file string, ops int) (float64, []float64, error) {
	fmt.Printf("  hubadd: the hub serving %s ...\n", strings.TrimPrefix(name, "hubadd-"))
	s, atZero, err := w.fleetServed(ctx, name, file, ops)
	if err != nil {
		return 0, nil, err
	}
	defer s.stop()
	pid := hubProcess(s.cmd.Process.Pid)
	if pid == 0 {
		return 0, nil, fmt.Errorf("hubadd: no hub process under opzero dev (pid %d)", s.cmd.Process.Pid)
	}
	time.Sleep(worthSettle)
	var reads []float64
	for i := range hubaddReads {
		if i > 0 {
			time.Sleep(hubaddEvery)
		}
		rss, _ := proc.Mem(pid)
		reads = append(reads, rss)
	}
	if ok, _ := atZero(ctx); !ok {
		return 0, nil, fmt.Errorf("hubadd: an operator was woken while nothing it needs changed")
	}
	sorted := slices.Sorted(slices.Values(reads))
	med := sorted[len(sorted)/2]
	fmt.Printf("    hub (serves): RSS %.1f MiB (median of %v)\n", med, reads)
	return med, reads, nil
}
