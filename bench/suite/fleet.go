package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/proc"
)

// The fleet part ("Operators nobody rebuilt, at zero"): ten operators run
// classic, as images nobody will rebuild, against the same ten served at
// zero by the hub through their own Deployments (`opzero hub adopt` of
// each one's release YAML): what stays running in each case, RSS under
// opzero dev, in one run. The classic operators are the repo's
// ConfigWatcher built in classic mode (-tags opzero_classic: a
// controller-runtime manager, informers and caches), each in a namespace
// of its own, watching the cluster's ConfigMaps; beside them the
// controller-runtime baseline of the worth part (bench/crbaseline), the
// same reconciler with no opzero at all.

var fleetObjects = "0,10000" // -fleet-objects

const fleetTitle = "Operators nobody rebuilt, at zero"

func fleet(ctx context.Context, r *report, dir string) error {
	counts, err := parseCounts(fleetObjects)
	if err != nil {
		return err
	}
	// The classic mode of the example, for opzero manifests and the
	// images opzero dev builds.
	os.Setenv("GOFLAGS", strings.TrimSpace(os.Getenv("GOFLAGS")+" -tags=opzero_classic"))
	w, stop, err := hubPart(ctx, dir, "fleet")
	if err != nil {
		return err
	}
	defer stop()
	classicFile, zeroFile, oneFile, narrowFile, err := w.fleetManifests(ctx)
	if err != nil {
		return err
	}
	type row struct {
		n                              int
		crRSS, classicRSS, hub, oneHub float64
		hubProcs                       int
	}
	var rows []row
	for _, n := range counts {
		fmt.Printf("  fleet: %d ConfigMaps ...\n", n)
		if err := w.ensureConfigMaps(ctx, n); err != nil {
			return err
		}
		cr, _, err := w.measureClassic(ctx, false, worthOps)
		if err != nil {
			return fmt.Errorf("controller-runtime baseline: %w", err)
		}
		crRSS, _ := sumMem(cr, nil)
		classicRSS, err := w.fleetClassic(ctx, classicFile, n)
		if err != nil {
			return err
		}
		hub, err := w.fleetAtZero(ctx, zeroFile, n, worthOps)
		if err != nil {
			return err
		}
		hubRSS, _ := sumMem(hub, nil)
		one, err := w.fleetAtZero(ctx, oneFile, n, 1)
		if err != nil {
			return err
		}
		oneRSS, _ := sumMem(one, nil)
		fmt.Printf("    %d ConfigMaps: 10 classic %.1f MiB (controller-runtime baseline %.1f MiB); at zero %.1f MiB in %d processes: %.3fx\n",
			n, classicRSS, crRSS, hubRSS, len(hub), hubRSS/classicRSS)
		fmt.Printf("    the hub serving 1 operator: %.1f MiB; each of the 9 more added %.2f MiB\n", oneRSS, (hubRSS-oneRSS)/float64(worthOps-1))
		rows = append(rows, row{n, crRSS, classicRSS, hubRSS, oneRSS, len(hub)})
	}
	type churnRow struct {
		what string
		res  churnResult
	}
	var churns []churnRow
	if worthChurn > 0 {
		for _, c := range []struct{ what, file string }{
			{"as `opzero hub adopt` derives it (every ConfigMap its role may watch wakes it)", oneFile},
			{"narrowed to its namespace (`--watch-namespace`)", narrowFile},
		} {
			fmt.Printf("  fleet: one unchanged operator %s, under unrelated churn for %s ...\n", c.what, worthChurn)
			res, err := w.fleetChurn(ctx, c.file, worthChurn)
			if err != nil {
				return err
			}
			fmt.Printf("    up %.2f%% of %s, %d starts for %d unrelated updates\n", 100*res.up.Seconds()/res.window.Seconds(), res.window.Round(time.Second), res.starts, res.updates)
			churns = append(churns, churnRow{c.what, res})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Ten operators, RSS under `opzero dev` (MiB), measured side by side in one run (`go run ./bench/suite -only fleet`): "+
		"the repo's ConfigWatcher built classic (controller-runtime's manager, unchanged for the hub) in ten namespaces, every ConfigMap of the "+
		"cluster in its cache; at zero, what stays running is the hub's two replicas serving the ten Deployments "+
		"(`opzero hub adopt` of each release, idle after 5 s); the controller-runtime baseline (bench/crbaseline) beside them.\n\n")
	fmt.Fprintf(&b, "| ConfigMaps | 10 classic | 10 controller-runtime baseline | at zero: the hub (serving + standby) | at zero / classic | at zero / baseline | the hub with 1 of them | added by each more |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f | %.1f (%d processes) | %.3fx | %.3fx | %.1f | %.2f |\n", x.n, x.classicRSS, x.crRSS, x.hub, x.hubProcs,
			x.hub/x.classicRSS, x.hub/x.crRSS, x.oneHub, (x.hub-x.oneHub)/float64(worthOps-1))
	}
	if len(churns) > 0 {
		fmt.Fprintf(&b, "\nOne of them served at zero while only ConfigMaps it does not need change (%d updates/s in other namespaces, for %s; instance time is the share of the window with its process running):\n\n", worthChurnHz, worthChurn)
		b.WriteString("| its Subscription | instance time | starts | unrelated updates |\n|---|---|---|---|\n")
		for _, c := range churns {
			fmt.Fprintf(&b, "| %s | %.2f%% | %d | %d |\n", c.what, 100*c.res.up.Seconds()/c.res.window.Seconds(), c.res.starts, c.res.updates)
		}
	}
	b.WriteString("\nNot measured here: the node's working set (kubelet's; `make e2e-knative` measures a fleet of unchanged kubebuilder projects there), and non-Go operators.\n")
	r.add(fleetTitle, b.String())
	return nil
}

// hubPart readies a part that runs the hub wiring in dir/part: the
// builds (the hub's is required), a control plane of its own and the
// worth part's namespaces and ConfigMaps on it.
func hubPart(ctx context.Context, dir, part string) (w *worthPart, stop func(), err error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	w = &worthPart{dir: filepath.Join(dir, part), root: root}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return nil, nil, err
	}
	if err := w.build(ctx); err != nil {
		return nil, nil, err
	}
	if w.hubNote != "" {
		return nil, nil, fmt.Errorf("%s", w.hubNote)
	}
	if stop, err = w.startPlane(ctx, part); err != nil {
		return nil, nil, err
	}
	if err := w.setup(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	return w, stop, nil
}

// fleetManifests writes the ten classic releases (one file), the same
// releases with the hub and each one's `opzero hub adopt` output, the
// first release alone with the hub and its adopt output, and that again
// with the adopt output narrowed to its namespace.
func (w *worthPart) fleetManifests(ctx context.Context) (classic, atZero, oneAtZero, oneNarrowed string, err error) {
	hub, releases, adopted, err := w.fleetReleases(ctx)
	if err != nil {
		return "", "", "", "", err
	}
	narrowed, err := w.opzeroOut(ctx, strings.NewReader(releases[0]), "hub", "adopt", "-f", "-", "--idle", "5s", "--watch-namespace", opNamespace(0))
	if err != nil {
		return "", "", "", "", err
	}
	classic, atZero = filepath.Join(w.dir, "classic.yaml"), filepath.Join(w.dir, "at-zero.yaml")
	oneAtZero, oneNarrowed = filepath.Join(w.dir, "one-at-zero.yaml"), filepath.Join(w.dir, "one-narrowed.yaml")
	all := append(append([]string{hub}, releases...), adopted...)
	for file, docs := range map[string][]string{
		classic:     releases,
		oneAtZero:   {hub, releases[0], adopted[0]},
		oneNarrowed: {hub, releases[0], narrowed},
		atZero:      all,
	} {
		if err := os.WriteFile(file, []byte(joinManifests(docs)), 0o644); err != nil {
			return "", "", "", "", err
		}
	}
	return classic, atZero, oneAtZero, oneNarrowed, nil
}

// fleetReleases is the hub's manifests and the ten classic releases, each
// with its `opzero hub adopt` output.
func (w *worthPart) fleetReleases(ctx context.Context) (hub string, releases, adopted []string, err error) {
	if hub, err = w.opzeroOut(ctx, nil, "hub", "manifests", "-o", "-"); err != nil {
		return "", nil, nil, err
	}
	for i := range worthOps {
		rel, err := w.opzeroOut(ctx, nil, "manifests", "--operator", "./examples/configwatcher", "--mode=classic", "--namespace", opNamespace(i), "-o", "-")
		if err != nil {
			return "", nil, nil, err
		}
		sub, err := w.fleetAdopt(ctx, rel)
		if err != nil {
			return "", nil, nil, err
		}
		releases, adopted = append(releases, rel), append(adopted, sub)
	}
	return hub, releases, adopted, nil
}

// fleetAdopt is `opzero hub adopt` of a release, idle after 5 s.
func (w *worthPart) fleetAdopt(ctx context.Context, release string) (string, error) {
	return w.opzeroOut(ctx, strings.NewReader(release), "hub", "adopt", "-f", "-", "--idle", "5s")
}

// fleetChurn runs the first release served by the hub (file), waits until
// its Deployment is at zero, then measures its instance time under d of
// unrelated churn.
func (w *worthPart) fleetChurn(ctx context.Context, file string, d time.Duration) (churnResult, error) {
	s, err := w.startDev(ctx, "fleet-churn-"+strings.TrimSuffix(filepath.Base(file), ".yaml"), file)
	if err != nil {
		return churnResult{}, err
	}
	defer s.stop()
	if err := w.deleteSubscriptions(ctx, 1); err != nil {
		return churnResult{}, err
	}
	if err := w.subscriptionsReady(ctx, 1); err != nil {
		return churnResult{}, fmt.Errorf("fleet churn: %w", err)
	}
	key := client.ObjectKey{Namespace: opNamespace(0), Name: "configwatcher"}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var dep appsv1.Deployment
		if err := w.c.Get(ctx, key, &dep); err != nil || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 0 {
			return false, nil
		}
		return len(classicProcs(s.cmd.Process.Pid)) == 0, nil
	}); err != nil {
		return churnResult{}, fmt.Errorf("fleet churn: %s not at zero within 5 minutes", key)
	}
	return w.churnFor(ctx, s, d, ofDeployment(key.String()))
}

func (w *worthPart) opzeroOut(ctx context.Context, stdin *strings.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, w.opzero, args...)
	cmd.Dir = w.root
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("opzero %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// deleteSubscriptions deletes the Subscriptions of the operators from
// the ops-th on.
func (w *worthPart) deleteSubscriptions(ctx context.Context, ops int) error {
	for i := ops; i < worthOps; i++ {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("opzero.dev/v1alpha1")
		u.SetKind("Subscription")
		if err := w.c.DeleteAllOf(ctx, u, client.InNamespace(opNamespace(i))); err != nil {
			return err
		}
	}
	return nil
}

// classicProcs are dev's processes of the classic ConfigWatchers.
func classicProcs(devPid int) []procMem {
	var out []procMem
	for _, p := range proc.Descendants(devPid) {
		if strings.Contains(strings.Join(proc.Argv(p), " "), "--mode=classic") {
			rss, hwm := proc.Mem(p)
			out = append(out, procMem{what: "classic ConfigWatcher", rss: rss, hwm: hwm})
		}
	}
	return out
}

// fleetClassic runs the ten classic releases and reads their RSS once
// settled.
func (w *worthPart) fleetClassic(ctx context.Context, file string, n int) (float64, error) {
	s, err := w.startDev(ctx, fmt.Sprintf("fleet-classic-%d", n), file)
	if err != nil {
		return 0, err
	}
	defer s.stop()
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		return len(classicProcs(s.cmd.Process.Pid)) == worthOps, nil
	}); err != nil {
		return 0, fmt.Errorf("fleet: %d classic processes, want %d", len(classicProcs(s.cmd.Process.Pid)), worthOps)
	}
	time.Sleep(worthSettle)
	procs := classicProcs(s.cmd.Process.Pid)
	rss, _ := sumMem(procs, nil)
	fmt.Printf("    10 classic ConfigWatchers: RSS %.1f MiB\n", rss)
	return rss, nil
}

// fleetAtZero runs the releases with the hub serving their Deployments,
// waits for every one at 0 replicas and no classic process, starts the
// hub's standby, and reads what stays running.
func (w *worthPart) fleetAtZero(ctx context.Context, file string, n, ops int) ([]procMem, error) {
	s, atZero, err := w.fleetServed(ctx, fmt.Sprintf("fleet-zero-%d-%d", ops, n), file, ops)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	pid, stop, err := w.secondHub(s.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	defer stop()
	time.Sleep(worthSettle)
	if ok, _ := atZero(ctx); !ok {
		return nil, fmt.Errorf("fleet: an operator was woken while only unrelated objects existed")
	}
	procs := alwaysOn(s.cmd.Process.Pid)
	rss, hwm := proc.Mem(pid)
	procs = append(procs, procMem{what: hubReplica2, shared: true, rss: rss, hwm: hwm})
	for _, p := range procs {
		fmt.Printf("      %s: RSS %.1f MiB\n", p.what, p.rss)
	}
	return procs, nil
}

// fleetServed runs the releases in file (the first ops operators) with
// the hub serving their Deployments and waits for every Subscription
// Ready, every Deployment at 0 replicas and no classic process; atZero
// says whether that still holds. The caller stops the session.
func (w *worthPart) fleetServed(ctx context.Context, name, file string, ops int) (s *devSession, atZero func(context.Context) (bool, error), err error) {
	if s, err = w.startDev(ctx, name, file); err != nil {
		return nil, nil, err
	}
	if ops < worthOps { // the others' Subscriptions, from the previous session, are not served by these manifests
		if err := w.deleteSubscriptions(ctx, ops); err != nil {
			s.stop()
			return nil, nil, err
		}
	}
	if err := w.subscriptionsReady(ctx, ops); err != nil {
		s.stop()
		return nil, nil, fmt.Errorf("fleet: %w", err)
	}
	atZero = func(ctx context.Context) (bool, error) {
		for i := range ops {
			var d appsv1.Deployment
			if err := w.c.Get(ctx, client.ObjectKey{Namespace: opNamespace(i), Name: "configwatcher"}, &d); err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
				return false, nil
			}
		}
		return len(classicProcs(s.cmd.Process.Pid)) == 0, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, atZero); err != nil {
		n := len(classicProcs(s.cmd.Process.Pid))
		s.stop()
		return nil, nil, fmt.Errorf("fleet: the %d Deployments not at zero within 5 minutes (%d classic processes left)", ops, n)
	}
	return s, atZero, nil
}
