// Command demo is `make demo`: the ConfigWatcher operator running
// serverless through `opzero dev` on a local control plane. It starts the
// plane, applies the application, runs `opzero dev --events=json` on the
// operator's manifests and then acts as a user would (kubectl apply,
// kubectl patch). It knows what happens from the event stream, one JSON
// object per line on opzero dev's standard output (dev.Event), never from
// the human log, which it only shows (opzero dev writes it to standard
// error when the events take standard output).
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devsession"
	"github.com/opzero/opzero/internal/proc"
)

const (
	ns   = "demo"
	idle = "3s"
	svc  = ns + "/configwatcher"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	root, dir, kubeconfig string
	c                     client.Client
	t0                    time.Time
	step                  int
	dev                   *devsession.Process
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Printf("\n[%d] %s\n", d.step, fmt.Sprintf(format, args...))
}

func (d *demo) note(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func run(ctx context.Context) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	d := &demo{root: root, t0: time.Now()}
	if d.dir, err = os.MkdirTemp("", "opzero-demo-"); err != nil {
		return err
	}
	defer func() {
		if os.Getenv("OPZERO_DEMO_KEEP") == "" {
			os.RemoveAll(d.dir)
		}
	}()
	fmt.Println("opzero demo: the Kubernetes Patterns ConfigWatcher, serverless through `opzero dev` on a local control plane")

	d.say("Local control plane (etcd, kube-apiserver, kube-controller-manager)")
	t := time.Now()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(d.dir, "plane"), DieWithParent: true})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\n[teardown] Ctrl-C to opzero dev (it stops the adapters and the operator), then the control plane")
		if d.dev != nil {
			d.dev.Stop()
		}
		_ = plane.Stop(false)
	}()
	d.kubeconfig = plane.Kubeconfig
	d.note("ready in %s at %s", since(t), plane.Server)
	if d.c, err = client.New(plane.Config, client.Options{}); err != nil {
		return err
	}

	d.say("The application: ConfigMap webapp-config and Deployment webapp (2 pods) in namespace %s", ns)
	if err := d.kubectl("create", "namespace", ns); err != nil {
		return err
	}
	if err := d.kubectl("apply", "-n", ns, "-f", filepath.Join(root, "examples/configwatcher/config/samples/webapp.yaml")); err != nil {
		return err
	}
	before, err := d.waitPods(ctx, nil)
	if err != nil {
		return err
	}
	d.note("pods: %s (Pending: there is no kubelet, which an operator does not need)", strings.Join(before, ", "))

	if err := d.startDev(ctx); err != nil {
		return err
	}
	return d.scenario(ctx, before)
}

func (d *demo) startDev(ctx context.Context, extra ...string) error {
	opzero := filepath.Join(d.dir, "opzero")
	if len(extra) == 0 {
		d.say("The operator's manifests, generated from its own description by `opzero manifests`")
		build := exec.CommandContext(ctx, "go", "build", "-o", opzero, "./cmd/opzero")
		build.Dir = d.root
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building opzero: %w\n%s", err, out)
		}
	}
	suffix := ""
	if len(extra) > 0 {
		suffix = "-knative"
	}
	dir := filepath.Join(d.dir, "manifests"+suffix)
	gen := append([]string{"manifests", "--operator", "./examples/configwatcher", "--namespace", ns, "--idle", idle, "-o", dir}, extra...)
	fmt.Printf("    $ opzero %s\n", strings.Join(gen, " "))
	cmd := exec.CommandContext(ctx, opzero, gen...)
	cmd.Dir = d.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("opzero manifests: %w\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		d.note("%s", l)
	}

	if len(extra) == 0 {
		d.say("opzero dev: apply them and play Knative's part (activator, statuses); the hub runs as the cluster's one process for every operator")
	}
	args := []string{"dev", "-f", dir, "--kubeconfig", d.kubeconfig, "--log-dir", filepath.Join(d.dir, "logs"+suffix), "--build-dir", d.root,
		"--events=json", "--no-status"}
	fmt.Printf("    $ opzero %s\n", strings.Join(args, " "))
	p, err := devsession.Start(opzero, svc, args)
	if err != nil {
		return err
	}
	d.dev = p
	ready, err := p.Next(ctx, 0, 3*time.Minute, "ready", func(e dev.Event) bool { return e.Event == dev.EventReady })
	if err != nil {
		return err
	}
	for _, s := range ready.Services {
		d.note("event: ready; Knative Service %s at %s; logs in %s", s.Name, s.URL, ready.LogDir)
	}
	return nil
}

func (d *demo) scenario(ctx context.Context, before []string) error {
	d.say("kubectl apply the book's ConfigWatcher (Example 23-5): the first event starts the operator")
	if err := d.dev.WaitZero(ctx); err != nil {
		return err
	}
	mark, t := d.dev.Len(), time.Now()
	if err := d.kubectl("apply", "-n", ns, "-f", filepath.Join(d.root, "examples/configwatcher/config/samples/configwatcher.yaml")); err != nil {
		return err
	}
	if _, err := d.dev.Next(ctx, mark, time.Minute, "the ConfigWatcher reconciled", func(e dev.Event) bool {
		return e.Event == dev.EventReconciled && e.Kind == "ConfigWatcher" && e.Key == ns+"/webapp-config-watcher"
	}); err != nil {
		return err
	}
	d.note("reconciled %s after apply%s: ConfigMap version recorded, no restart on first sight", since(t), d.dev.ColdNote(mark))
	if err := d.scaleToZero(ctx, mark); err != nil {
		return err
	}

	d.say("Edit the ConfigMap: a second cold start; the operator restarts the pods the ConfigWatcher selects")
	if err := d.dev.WaitZero(ctx); err != nil {
		return err
	}
	mark, t = d.dev.Len(), time.Now()
	if err := d.kubectl("patch", "-n", ns, "configmap", "webapp-config", "--type=merge", "-p", `{"data":{"message":"Hello, opzero"}}`); err != nil {
		return err
	}
	if _, err := d.dev.Next(ctx, mark, time.Minute, "the ConfigMap's event reconciled", func(e dev.Event) bool {
		return e.Event == dev.EventReconciled && e.Kind == "ConfigMap" && e.Key == ns+"/webapp-config"
	}); err != nil {
		return err
	}
	d.note("reconciled %s after the edit%s", since(t), d.dev.ColdNote(mark))
	after, err := d.waitPods(ctx, before)
	if err != nil {
		return err
	}
	d.note("pods restarted %s after the edit: %s -> %s", since(t), strings.Join(before, ", "), strings.Join(after, ", "))
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "configwatchers")
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "ksvc,subscriptions.opzero.dev")
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "events", "--field-selector", "reason=Restarted", "-o", "custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message")
	if err := d.scaleToZero(ctx, mark); err != nil {
		return err
	}
	if err := d.unrelatedWakesNothing(ctx); err != nil {
		return err
	}

	d.say("What opzero dev reported, from its event stream")
	d.dev.Summarize(d.t0)

	hub, err := d.alwaysOn(ctx)
	if err != nil {
		return err
	}
	if err := d.knativeWiring(ctx); err != nil {
		return err
	}
	knative, err := d.alwaysOn(ctx)
	if err != nil {
		return err
	}
	d.say("What stays on while the operator is at zero (RSS from /proc, after %s settling)", settle)
	d.note("%-46s %8s", "hub wiring (the default), one hub replica", "MiB")
	d.printParts(hub)
	d.note("%-46s %8s", "Knative wiring (opzero manifests --source=knative)", "MiB")
	d.printParts(knative)
	d.note("opzero dev runs one hub process; the manifests deploy 2 replicas (a standby takes over a dead one's buckets), so a cluster keeps about twice the hub's figure on")
	d.note("the hub serves every operator of the cluster; per operator, the Knative wiring runs one adapter per watched kind and a wakeup source (mtping is shared by all PingSources)")
	if f := os.Getenv("OPZERO_DEMO_TIMELINE"); f != "" {
		if err := d.dev.DrawTimeline(f); err != nil {
			return err
		}
		d.note("the session as an SVG timeline: %s (what opzero dev timeline draws from an events file)", f)
	}
	d.say("Done in %s", since(d.t0))
	return nil
}

// scaleToZero waits for the Service's scaled-to-zero event after mark.
func (d *demo) scaleToZero(ctx context.Context, mark int) error {
	t := time.Now()
	if _, err := d.dev.Next(ctx, mark, time.Minute, "scaled to zero", func(e dev.Event) bool {
		return e.Event == dev.EventScaledToZero && e.Service == svc
	}); err != nil {
		return err
	}
	d.note("event: scaled to zero, %s later (idle period %s); 0 operator processes", since(t), idle)
	return nil
}

// waitPods waits for 2 live webapp pods none of which is in old.
func (d *demo) waitPods(ctx context.Context, old []string) ([]string, error) {
	var names []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if d.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "webapp"}) != nil {
			return false, nil
		}
		names = names[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			for _, o := range old {
				if o == p.Name {
					return false, nil
				}
			}
			names = append(names, p.Name)
		}
		return len(names) == 2, nil
	})
	return names, err
}

func (d *demo) kubectl(args ...string) error {
	fmt.Printf("    $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(d.root, "bin", "kubectl"), append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("      " + line)
	}
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", args[0], err)
	}
	return nil
}

// settle is how long the always-on processes run before their memory is
// read: past their start and the hub's first trim (10 s).
const settle = 15 * time.Second

// part is one always-on process.
type part struct {
	name string
	rss  float64 // MiB
}

// alwaysOn waits settle, then lists opzero dev's processes (at zero
// instances, exactly what stays on) with their RSS.
func (d *demo) alwaysOn(ctx context.Context) ([]part, error) {
	if err := d.dev.WaitZero(ctx); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(settle):
	}
	var out []part
	for _, pid := range proc.Descendants(d.dev.PID()) {
		rss, _ := proc.Mem(pid)
		out = append(out, part{name: fmt.Sprintf("%s (pid %d)", command(pid), pid), rss: rss})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// command names a process: its program (the part after cmd_ of a built
// ko:// path), and the subcommand of opzero's CLI.
func command(pid int) string {
	args := proc.Argv(pid)
	if len(args) == 0 {
		return "?"
	}
	name := filepath.Base(args[0])
	if i := strings.LastIndex(name, "_cmd_"); i >= 0 {
		name = name[i+len("_cmd_"):]
	}
	if name == "opzero" && len(args) > 1 {
		name += " " + args[1]
	}
	return name
}

func (d *demo) printParts(parts []part) {
	var sum float64
	for _, p := range parts {
		d.note("  %-44s %8.1f", p.name, p.rss)
		sum += p.rss
	}
	d.note("  %-44s %8.1f", "total", sum)
}

// unrelatedWakesNothing: an edit of a ConfigMap no ConfigWatcher names
// wakes nothing (the hub filters it out), and an edit of the watched one
// does.
func (d *demo) unrelatedWakesNothing(ctx context.Context) error {
	d.say("An unrelated ConfigMap changes: the hub wakes nothing; the watched one changes: it wakes the operator")
	if err := d.dev.WaitZero(ctx); err != nil {
		return err
	}
	mark := d.dev.Len()
	if err := d.kubectl("create", "-n", ns, "configmap", "unrelated", "--from-literal=k=v"); err != nil {
		return err
	}
	if err := d.kubectl("patch", "-n", ns, "configmap", "webapp-config", "--type=merge", "-p", `{"data":{"message":"Hello from the hub"}}`); err != nil {
		return err
	}
	if _, err := d.dev.Next(ctx, mark, time.Minute, "the ConfigMap's event reconciled", func(e dev.Event) bool {
		return e.Event == dev.EventReconciled && e.Kind == "ConfigMap" && e.Key == ns+"/webapp-config"
	}); err != nil {
		return err
	}
	for _, e := range d.dev.Events(mark) {
		if e.Event == dev.EventDelivery && e.Key == ns+"/unrelated" {
			return fmt.Errorf("the unrelated ConfigMap woke the operator: %+v", e)
		}
	}
	d.note("the edit of webapp-config was delivered by the hub%s; the unrelated ConfigMap woke nothing (the hub knows only ConfigWatchers' spec.configMap matter)", d.dev.ColdNote(mark))
	return d.scaleToZero(ctx, mark)
}

// knativeWiring moves the operator to Knative's own sources for the
// comparison: opzero dev stops, the Subscription goes, `opzero manifests
// --source=knative` writes an ApiServerSource per kind, the PingSources
// and the wakeup source, and opzero dev runs them.
func (d *demo) knativeWiring(ctx context.Context) error {
	d.say("The same operator on Knative's own sources (--source=knative), for comparison")
	d.dev.Stop()
	d.dev = nil
	if err := d.kubectl("delete", "-n", ns, "subscriptions.opzero.dev", "--all"); err != nil {
		return err
	}
	if err := d.startDev(ctx, "--source=knative"); err != nil {
		return err
	}
	_ = d.kubectl("get", "-n", ns, "apiserversources,pingsources")
	return d.dev.WaitZero(ctx)
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
