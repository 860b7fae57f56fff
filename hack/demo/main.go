// Command demo is `make demo`: the ConfigWatcher operator running
// serverless through `opzero dev` on a local control plane. The demo only
// starts the plane, applies the application, runs `bin/opzero dev` on the
// operator's manifests and then acts as a user would (kubectl apply, kubectl
// patch), printing what opzero dev reports and the timings.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
)

const (
	ns   = "demo"
	idle = "3s"
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
	dev                   *devProcess
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
			d.dev.stop()
		}
		_ = plane.Stop(false)
	}()
	d.kubeconfig = plane.Kubeconfig
	d.note("ready in %s at %s", since(t), plane.Server)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	if d.c, err = client.New(plane.Config, client.Options{Scheme: scheme}); err != nil {
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

func (d *demo) startDev(ctx context.Context) error {
	d.say("The operator's manifests, generated from its own description by `opzero manifests`")
	opzero := filepath.Join(d.dir, "opzero")
	build := exec.CommandContext(ctx, "go", "build", "-o", opzero, "./cmd/opzero")
	build.Dir = d.root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building opzero: %w\n%s", err, out)
	}
	dir := filepath.Join(d.dir, "manifests")
	gen := []string{"manifests", "--operator", "./examples/configwatcher", "--namespace", ns, "--idle", idle, "-o", dir}
	fmt.Printf("    $ opzero %s\n", strings.Join(gen, " "))
	cmd := exec.CommandContext(ctx, opzero, gen...)
	cmd.Dir = d.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("opzero manifests: %w\n%s", err, out)
	}
	if err := d.summarize(dir); err != nil {
		return err
	}

	d.say("opzero dev: apply them and play Knative's part (activator, Knative's real adapters, statuses)")
	args := []string{"dev", "-f", dir, "--kubeconfig", d.kubeconfig, "--log-dir", filepath.Join(d.dir, "logs"), "--build-dir", d.root}
	fmt.Printf("    $ opzero %s\n", strings.Join(args, " "))
	p, err := startDev(ctx, opzero, args)
	if err != nil {
		return err
	}
	d.dev = p
	return p.wait(ctx, "opzero dev: ready", 1, 3*time.Minute)
}

// summarize prints one line per generated object: kind and name.
func (d *demo) summarize(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var kinds []string
		for _, doc := range strings.Split(string(b), "\n---\n") {
			kind, name := "", ""
			for _, l := range strings.Split(doc, "\n") {
				if v, ok := strings.CutPrefix(l, "kind: "); ok {
					kind = v
				}
				if v, ok := strings.CutPrefix(l, "  name: "); ok && name == "" {
					name = v
				}
			}
			if kind != "" {
				kinds = append(kinds, kind+" "+name)
			}
		}
		d.note("%-18s %s", filepath.Base(f), strings.Join(kinds, ", "))
	}
	return nil
}

func (d *demo) scenario(ctx context.Context, before []string) error {
	d.say("kubectl apply the book's ConfigWatcher (Example 23-5): the first event starts the operator")
	if err := d.dev.waitZero(ctx); err != nil {
		return err
	}
	starts, zeros := d.dev.count("starting the operator"), d.dev.count("scaled to zero")
	t := time.Now()
	if err := d.kubectl("apply", "-n", ns, "-f", filepath.Join(d.root, "examples/configwatcher/config/samples/configwatcher.yaml")); err != nil {
		return err
	}
	cw := &v1.ConfigWatcher{}
	key := client.ObjectKey{Namespace: ns, Name: "webapp-config-watcher"}
	if err := poll(ctx, func() bool { return d.c.Get(ctx, key, cw) == nil && cw.Status.ConfigMapVersion != "" }); err != nil {
		return fmt.Errorf("the ConfigWatcher was not reconciled: %w", err)
	}
	d.note("reconciled %s after apply%s: ConfigMap version recorded, no restart on first sight", since(t), d.dev.coldNote(starts))
	t = time.Now()
	if err := d.dev.wait(ctx, "scaled to zero", zeros+1, time.Minute); err != nil {
		return err
	}
	d.note("back to 0 operator processes %s later", since(t))

	d.say("Edit the ConfigMap: a second cold start; the operator restarts the pods the ConfigWatcher selects")
	if err := d.dev.waitZero(ctx); err != nil {
		return err
	}
	starts, zeros = d.dev.count("starting the operator"), d.dev.count("scaled to zero")
	t = time.Now()
	if err := d.kubectl("patch", "-n", ns, "configmap", "webapp-config", "--type=merge", "-p", `{"data":{"message":"Hello, opzero"}}`); err != nil {
		return err
	}
	after, err := d.waitPods(ctx, before)
	if err != nil {
		return err
	}
	d.note("pods restarted %s after the edit%s: %s -> %s", since(t), d.dev.coldNote(starts), strings.Join(before, ", "), strings.Join(after, ", "))
	if err := poll(ctx, func() bool { return d.c.Get(ctx, key, cw) == nil && cw.Status.Restarts == 1 }); err != nil {
		return fmt.Errorf("status not updated: %w", err)
	}
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "configwatchers")
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "ksvc,apiserversources,pingsources")
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "events", "--field-selector", "reason=Restarted", "-o", "custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message")
	t = time.Now()
	if err := d.dev.wait(ctx, "scaled to zero", zeros+1, time.Minute); err != nil {
		return err
	}
	d.note("back to 0 operator processes %s later", since(t))
	d.say("Done in %s", since(d.t0))
	return nil
}

// waitPods waits for 2 live webapp pods none of which is in old.
func (d *demo) waitPods(ctx context.Context, old []string) ([]string, error) {
	var names []string
	err := poll(ctx, func() bool {
		pods := &corev1.PodList{}
		if d.c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "webapp"}) != nil {
			return false
		}
		names = names[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			for _, o := range old {
				if o == p.Name {
					return false
				}
			}
			names = append(names, p.Name)
		}
		return len(names) == 2
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

func poll(ctx context.Context, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }

// devProcess is `opzero dev` running as a child; its output is printed
// indented, and counted so the demo can wait for what it reports.
type devProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	seen map[string]int
	cond *sync.Cond
}

func startDev(ctx context.Context, bin string, args []string) (*devProcess, error) {
	p := &devProcess{cmd: exec.Command(bin, args...), done: make(chan struct{}), seen: map[string]int{}}
	p.cond = sync.NewCond(&p.mu)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting opzero dev: %w", err)
	}
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			line := s.Text()
			fmt.Println("    opzero dev | " + line)
			p.mu.Lock()
			for _, k := range []string{"opzero dev: ready", "scaled to zero", "starting the operator"} {
				if strings.Contains(line, k) {
					p.seen[k]++
				}
			}
			p.cond.Broadcast()
			p.mu.Unlock()
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		pw.Close()
		close(p.done)
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	return p, nil
}

// wait returns once opzero dev has printed a line containing what n times.
func (p *devProcess) wait(ctx context.Context, what string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	stop := context.AfterFunc(ctx, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
	defer stop()
	go func() { time.Sleep(timeout); p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() }()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.seen[what] < n {
		select {
		case <-p.done:
			return fmt.Errorf("opzero dev exited before it said %q", what)
		default:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("opzero dev did not say %q within %s", what, timeout)
		}
		p.cond.Wait()
	}
	return nil
}

// count is how many lines containing what opzero dev has printed.
func (p *devProcess) count(what string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[what]
}

// waitZero waits until every instance opzero dev started has scaled to
// zero (a sweep may have started one).
func (p *devProcess) waitZero(ctx context.Context) error {
	return p.wait(ctx, "scaled to zero", p.count("starting the operator"), time.Minute)
}

func (p *devProcess) coldNote(startsBefore int) string {
	if p.count("starting the operator") > startsBefore {
		return " (cold start included)"
	}
	return " (an instance was already running)"
}

// stop sends SIGINT (Ctrl-C) and waits for opzero dev to exit.
func (p *devProcess) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
