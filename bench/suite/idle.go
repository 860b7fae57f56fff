package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/proc"
)

// The idle part: how much instance time the sweeps cost an
// operator at zero when nothing changes. The CronJob-style project
// (bench/testdata/cronjob: kubebuilder's CronJob tutorial in shape, its
// status without observedGeneration, so that every anti-entropy sweep it
// is sent reconciles every object) and, beside it in the same session and
// window, its baseline: the same project's ObservedCronJob operator, whose
// status carries observedGeneration (a sweep it is sent finds nothing to
// reconcile, but still wakes it). Both run through opzero dev in the
// default wiring (the hub) with the manifests' own sweeps and scale-to-zero
// period (Knative's: no --idle).

// idleFor is -idle-for: the window with nothing changing.
var idleFor = time.Hour

func init() {
	flag.DurationVar(&idleFor, "idle-for", idleFor, "idle: how long the window with nothing changing lasts (after the objects converged and the hub's first sweep)")
}

const idleObjects = 50 // objects of each operator's kind, converged before the window

// idleProject is one operator of the part.
type idleProject struct {
	name, pkg, ns string
	kind          string // its primary kind (tutorial.opzero.dev/v1)
	observed      bool   // its status carries observedGeneration
}

var idleProjects = []idleProject{
	{name: "cronjob", pkg: "./bench/testdata/cronjob/cmd/cronjob", ns: "idle-plain", kind: "CronJob"},
	{name: "observedcronjob", pkg: "./bench/testdata/cronjob/cmd/observed", ns: "idle-observed", kind: "ObservedCronJob", observed: true},
}

func (p idleProject) service() string { return p.ns + "/" + p.name }

func (p idleProject) label() string {
	if p.observed {
		return "baseline: with observedGeneration"
	}
	return "CronJob-style, no observedGeneration"
}

// idleResult is one project's window.
type idleResult struct {
	churnResult
	sweeps      []sweepSpec
	scheduled   [2]int // anti-entropy, full sweep ticks scheduled in the window
	delivered   [2]int // of them, delivered to the operator
	firstSweep  string // the hub's first anti-entropy sweep, before the window
	firstKeys   int    // keys it reconciled
	skippedNote string
}

// sweepSpec is one of a Subscription's sweeps.
type sweepSpec struct{ name, schedule, data string }

func (s sweepSpec) full() bool { return s.data != "" }

func idlePart(ctx context.Context, r *report, dir string) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	w := &worthPart{dir: filepath.Join(dir, "idle"), root: root, ownIdle: true}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	if err := w.build(ctx); err != nil {
		return err
	}
	if w.hubNote != "" {
		return fmt.Errorf("%s", w.hubNote)
	}
	stop, err := w.startPlane(ctx, "idle")
	if err != nil {
		return err
	}
	defer stop()
	var docs []string
	for _, p := range idleProjects {
		if err := w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}); err != nil {
			return err
		}
		args := []string{"manifests", "--operator", p.pkg, "--namespace", p.ns, "-o", "-"}
		cmd := exec.CommandContext(ctx, w.opzero, args...)
		cmd.Dir = w.root
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("opzero %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		docs = append(docs, string(out))
	}
	manifests := filepath.Join(w.dir, "idle.yaml")
	if err := os.WriteFile(manifests, []byte(joinManifests(docs)), 0o644); err != nil {
		return err
	}
	fmt.Println("  idle: opzero dev (the hub wiring, the manifests' sweeps and scale-to-zero period) ...")
	s, err := w.startDev(ctx, "idle", manifests)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := w.subscriptionsReady(ctx, len(idleProjects)); err != nil {
		return err
	}
	started := time.Now()
	res := map[string]*idleResult{}
	for _, p := range idleProjects {
		sw, err := w.sweepsOf(ctx, p)
		if err != nil {
			return err
		}
		res[p.name] = &idleResult{sweeps: sw}
	}
	fmt.Printf("  idle: %d objects of each kind, converging ...\n", idleObjects)
	t := time.Now()
	if err := w.idleObjects(ctx); err != nil {
		return err
	}
	fmt.Printf("    converged in %s\n", time.Since(t).Round(time.Second))
	// The hub sends its first anti-entropy sweep after it starts serving a
	// Subscription (nothing vouches for the time before): it is waited
	// for, so that the window is the hub's steady state.
	fmt.Println("  idle: waiting for the hub's first anti-entropy sweep of each operator (at most one schedule period) ...")
	if err := w.firstSweeps(ctx, s, started, res); err != nil {
		return err
	}
	if err := idleAtZero(ctx, s, 5*time.Minute); err != nil {
		return err
	}
	fmt.Printf("  idle: nothing changes for %s (from %s UTC) ...\n", idleFor, time.Now().UTC().Format("15:04:05"))
	sent0, skipped0, ok0 := hubSweepCounters(s.cmd.Process.Pid)
	t0 := time.Now()
	for end := t0.Add(idleFor); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gone:
			return fmt.Errorf("opzero dev ended during the window")
		case <-time.After(min(time.Until(end), 10*time.Minute)):
		}
		if rest := time.Until(end); rest > 0 {
			fmt.Printf("    %s to go\n", rest.Round(time.Second))
		}
	}
	t1 := time.Now()
	sent1, skipped1, ok1 := hubSweepCounters(s.cmd.Process.Pid)
	hubNote := "The hub's sweep counters could not be read"
	if ok0 && ok1 {
		hubNote = fmt.Sprintf("The hub's counters over the window, both operators: `opzero_hub_sweeps_total` +%.0f, `opzero_hub_sweeps_skipped_total` +%.0f", sent1-sent0, skipped1-skipped0)
	}
	time.Sleep(2 * time.Second) // an answer in flight at t1 is written
	evs := readEvents(s.events)
	for _, p := range idleProjects {
		rr := res[p.name]
		rr.window = t1.Sub(t0)
		churnWindow(ofService(evs, p.service()), t0, t1, &rr.churnResult, ofServices)
		for _, sw := range rr.sweeps {
			i := 0
			if sw.full() {
				i = 1
			}
			rr.scheduled[i] += ticksIn(sw.schedule, t0, t1)
			rr.delivered[i] += sweepDeliveries(evs, p, sw.name, t0, t1)
		}
	}
	r.add(idleTitle, idleSection(res, t0, hubNote)) // add prints it
	return nil
}

const idleTitle = "Sweeps at zero with nothing changing"

// hubSweepCounters reads the sweep counters of the hub opzero dev runs
// (its /metrics on its --health-addr): ticks sent, anti-entropy ticks
// skipped, over every Subscription; ok false if it cannot.
func hubSweepCounters(devPid int) (sent, skipped float64, ok bool) {
	for _, p := range proc.Descendants(devPid) {
		argv := proc.Argv(p)
		if len(argv) == 0 || !strings.Contains(filepath.Base(argv[0]), "opzero-hub") {
			continue
		}
		for _, a := range argv[1:] {
			addr, found := strings.CutPrefix(a, "--health-addr=")
			if !found {
				continue
			}
			if strings.HasPrefix(addr, ":") {
				addr = "127.0.0.1" + addr
			}
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				return 0, 0, false
			}
			defer resp.Body.Close()
			m, err := parseMetrics(resp.Body)
			if err != nil {
				return 0, 0, false
			}
			sent, ok1 := m.sum("opzero_hub_sweeps_total", nil)
			skipped, ok2 := m.sum("opzero_hub_sweeps_skipped_total", nil)
			return sent, skipped, ok1 && ok2
		}
	}
	return 0, 0, false
}

// ofService keeps the events of Service key (its instances, deliveries
// and reconciles).
func ofService(evs []dev.Event, key string) []dev.Event {
	var out []dev.Event
	for _, e := range evs {
		if e.Service == key {
			out = append(out, e)
		}
	}
	return out
}

// sweepsOf reads the sweeps of p's Subscription (as opzero manifests
// scheduled them).
func (w *worthPart) sweepsOf(ctx context.Context, p idleProject) ([]sweepSpec, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("opzero.dev/v1alpha1")
	u.SetKind("Subscription")
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: p.name}, u); err != nil {
		return nil, fmt.Errorf("the Subscription of %s: %w", p.service(), err)
	}
	l, _, _ := unstructured.NestedSlice(u.Object, "spec", "sweeps")
	var out []sweepSpec
	for _, x := range l {
		m, _ := x.(map[string]any)
		s := func(k string) string { v, _ := m[k].(string); return v }
		out = append(out, sweepSpec{name: s("name"), schedule: s("schedule"), data: s("data")})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the Subscription of %s schedules no sweep", p.service())
	}
	return out, nil
}

// idleObjects creates idleObjects objects of each project's kind and waits
// until every one is converged: its child listed in status.active (and
// status.observedGeneration its generation, for the baseline).
func (w *worthPart) idleObjects(ctx context.Context) error {
	for _, p := range idleProjects {
		err := forEach(ctx, 8, 0, idleObjects, func(ctx context.Context, i int) error {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("tutorial.opzero.dev/v1")
			u.SetKind(p.kind)
			u.SetNamespace(p.ns)
			u.SetName(fmt.Sprintf("cj-%02d", i))
			_ = unstructured.SetNestedField(u.Object, "*/5 * * * *", "spec", "schedule")
			return w.c.Create(ctx, u)
		})
		if err != nil {
			return fmt.Errorf("creating %ss: %w", p.kind, err)
		}
	}
	var pending string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range idleProjects {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion("tutorial.opzero.dev/v1")
			l.SetKind(p.kind + "List")
			if err := w.c.List(ctx, l, client.InNamespace(p.ns)); err != nil {
				return false, nil
			}
			n := 0
			for _, it := range l.Items {
				active, _, _ := unstructured.NestedStringSlice(it.Object, "status", "active")
				og, _, _ := unstructured.NestedInt64(it.Object, "status", "observedGeneration")
				if len(active) == 1 && active[0] == it.GetName()+"-job" && (!p.observed || og == it.GetGeneration()) {
					n++
				}
			}
			if n < idleObjects {
				pending = fmt.Sprintf("%d of %d %ss converged", n, idleObjects, p.kind)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("not converged within 5 minutes (%s): %w", pending, err)
	}
	return nil
}

// firstSweeps waits (up to one anti-entropy period and a minute) until
// each operator answered the hub's first anti-entropy sweep after
// started, and notes what it reconciled.
func (w *worthPart) firstSweeps(ctx context.Context, s *devSession, started time.Time, res map[string]*idleResult) error {
	deadline := time.Now().Add(11 * time.Minute)
	for {
		evs := readEvents(s.events)
		done := true
		for _, p := range idleProjects {
			rr := res[p.name]
			if rr.firstSweep != "" {
				continue
			}
			for _, sw := range rr.sweeps {
				if sw.full() {
					continue
				}
				mine := ofService(evs, p.service())
				for i, e := range mine {
					if e.Event == dev.EventDelivery && e.Wake == dev.WakeSweep && strings.HasSuffix(e.Source, "/"+sw.name) && e.Time.After(started) {
						rr.firstSweep = fmt.Sprintf("%s UTC (%s), answered %d in %.0f ms", e.Time.UTC().Format("15:04:05"), sw.name, e.Code, e.DurationMS)
						// its reconciles: the event dev writes right after the delivery's
						if i+1 < len(mine) && mine[i+1].Event == dev.EventReconciled && mine[i+1].Key == e.Key {
							rr.firstKeys = mine[i+1].Reconciled
						}
						fmt.Printf("    %s: first anti-entropy sweep %s, %d reconciled\n", p.service(), rr.firstSweep, rr.firstKeys)
						break
					}
				}
			}
			if rr.firstSweep == "" {
				done = false
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			for _, p := range idleProjects {
				if res[p.name].firstSweep == "" {
					res[p.name].firstSweep = "none within 11 minutes of the start"
				}
			}
			fmt.Println("    no first anti-entropy sweep within 11 minutes: the window starts anyway")
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gone:
			return fmt.Errorf("opzero dev ended while waiting for the first sweep")
		case <-time.After(2 * time.Second):
		}
	}
}

// idleAtZero waits until no operator instance runs (the last one stopped
// for idleness), within d.
func idleAtZero(ctx context.Context, s *devSession, d time.Duration) error {
	for deadline := time.Now().Add(d); ; {
		if instances(readEvents(s.events), time.Now(), ofServices) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operators did not scale to zero within %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// ticksIn is how many times schedule fires in (t0, t1], read as the hub
// reads it.
func ticksIn(schedule string, t0, t1 time.Time) int {
	sched, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(schedule)
	if err != nil {
		return 0
	}
	n := 0
	for t := sched.Next(t0); !t.IsZero() && !t.After(t1); t = sched.Next(t) {
		n++
	}
	return n
}

// sweepDeliveries counts the deliveries of sweep name to p in [t0, t1].
func sweepDeliveries(evs []dev.Event, p idleProject, name string, t0, t1 time.Time) int {
	n := 0
	for _, e := range ofService(evs, p.service()) {
		if e.Event == dev.EventDelivery && e.Wake == dev.WakeSweep && strings.HasSuffix(e.Source, "/"+name) &&
			!e.Time.Before(t0) && !e.Time.After(t1) {
			n++
		}
	}
	return n
}

func idleSection(res map[string]*idleResult, t0 time.Time, hubNote string) string {
	var b strings.Builder
	first := res[idleProjects[0].name]
	var sched []string
	for _, sw := range first.sweeps {
		what := "anti-entropy sweep (no data)"
		if sw.full() {
			what = "full sweep (data " + sw.data + ")"
		}
		sched = append(sched, fmt.Sprintf("%s `%s`", what, sw.schedule))
	}
	fmt.Fprintf(&b, "`go run ./bench/suite -only idle -idle-for %s` (run %s UTC). Two adopted controller-runtime operators of "+
		"the CronJob-style project (bench/testdata/cronjob: the tutorial's shape, a child per object listed in `status.active`, "+
		"its status written every reconcile, no requeue) run through `opzero dev` in the default wiring (the hub), with the "+
		"sweeps as `opzero manifests` schedules them (%s) and the manifests' scale-to-zero period (Knative's default, %s: no "+
		"`--idle`). Each has %d objects of its kind, created and converged before the window; the window starts after the "+
		"hub's first anti-entropy sweep of each (sent once after it starts serving a Subscription, or at once after it relisted a "+
		"watch: it cannot vouch for the time before) and with both at zero; nothing changes in it. The baseline's status carries `observedGeneration`, "+
		"the CronJob-style one's does not (every anti-entropy sweep it is sent reconciles all %d). Goal (issue 54): instance "+
		"time ≤ 1%% of the window for the project without observedGeneration.\n\n",
		idleFor, t0.UTC().Format("2006-01-02 15:04"), strings.Join(sched, ", "), dev.DefaultIdle, idleObjects, idleObjects)
	b.WriteString("| operator | window | anti-entropy sweeps scheduled / delivered | full sweeps scheduled / delivered | cold starts | deliveries | keys reconciled | instance time | of the window |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range idleProjects {
		rr := res[p.name]
		fmt.Fprintf(&b, "| %s (%s) | %s | %d / %d | %d / %d | %d | %d | %d | %s | %.2f%% |\n", p.label(), p.service(),
			rr.window.Round(time.Second), rr.scheduled[0], rr.delivered[0], rr.scheduled[1], rr.delivered[1],
			rr.coldStarts, rr.deliveries, rr.reconciles, rr.up.Round(100*time.Millisecond), 100*rr.up.Seconds()/rr.window.Seconds())
	}
	plain := res[idleProjects[0].name]
	frac := 100 * plain.up.Seconds() / plain.window.Seconds()
	met := "met"
	if frac > 1 {
		met = "**not met**"
	}
	fmt.Fprintf(&b, "\nGoal, instance time ≤ 1%% of the window without observedGeneration: %s (%.2f%%). A full sweep (with data) is sent on its schedule whatever, and reconciles every object of either operator: a window holds one only if it spans one of its times; its wake costs a cold start and the scale-to-zero period. This part is not in the full run (`make bench`): it lasts its window.\n", met, frac)
	b.WriteString("\nBefore the window, the hub's first anti-entropy sweep: ")
	var firsts []string
	for _, p := range idleProjects {
		rr := res[p.name]
		firsts = append(firsts, fmt.Sprintf("%s %s, %d keys reconciled", p.name, rr.firstSweep, rr.firstKeys))
	}
	b.WriteString(strings.Join(firsts, "; ") + ". " + hubNote + ".\n")
	return b.String()
}
