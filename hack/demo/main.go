// Command demo is `make demo`: the ConfigWatcher operator running
// serverless on a local control plane, fed by Knative's real ApiServerSource
// adapter. It prints each step with its timing and tears everything down.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/devenv/activator"
	"github.com/opzero/opzero/devenv/controlplane"
	"github.com/opzero/opzero/devenv/knative"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
)

const (
	ns   = "demo"
	idle = 3 * time.Second
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
	bin, dir, kubeconfig string
	c                    client.Client
	t0                   time.Time
	step                 int
	delivered, skipped   atomic.Int64
	act                  *activator.Activator
	coldAt               time.Time
	deliveries           lines
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
	d := &demo{bin: filepath.Join(root, "bin"), t0: time.Now()}
	if d.dir, err = os.MkdirTemp("", "opzero-demo-"); err != nil {
		return err
	}
	defer func() {
		if os.Getenv("OPZERO_DEMO_KEEP") == "" {
			os.RemoveAll(d.dir)
		}
	}()
	fmt.Println("opzero demo: the Kubernetes Patterns ConfigWatcher, running serverless on a local control plane")

	d.say("Local control plane (etcd, kube-apiserver, kube-controller-manager)")
	t := time.Now()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(d.dir, "plane"), DieWithParent: true})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\n[teardown] stopping the operator, the adapter and the control plane")
		_ = plane.Stop(false)
	}()
	d.kubeconfig = plane.Kubeconfig
	d.note("ready in %s at %s", since(t), plane.Server)
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, filepath.Join(root, "examples/configwatcher/config/crd")); err != nil {
		return err
	}
	d.note("CRD configwatchers.k8spatterns.io installed (generated from Go types by controller-gen)")
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

	port, err := d.startOperator(ctx, root)
	if err != nil {
		return err
	}
	if err := d.startAdapter(ctx, port); err != nil {
		return err
	}
	return d.scenario(ctx, root, before)
}

func (d *demo) scenario(ctx context.Context, root string, before []string) error {
	d.say("kubectl apply the book's ConfigWatcher (Example 23-5)")
	t := time.Now()
	if err := d.kubectl("apply", "-n", ns, "-f", filepath.Join(root, "examples/configwatcher/config/samples/configwatcher.yaml")); err != nil {
		return err
	}
	cw := &v1.ConfigWatcher{}
	key := client.ObjectKey{Namespace: ns, Name: "webapp-config-watcher"}
	if err := poll(ctx, func() bool { return d.c.Get(ctx, key, cw) == nil && cw.Status.ConfigMapVersion != "" }); err != nil {
		return fmt.Errorf("the ConfigWatcher was not reconciled: %w; operator log:\n%s", err, d.operatorLog())
	}
	d.note("reconciled %s after apply, cold start included: Ready, ConfigMap version recorded, no restart on first sight", since(t))
	if err := d.waitZero(ctx); err != nil {
		return err
	}

	d.say("Edit the ConfigMap: the operator restarts the pods the ConfigWatcher selects")
	t = time.Now()
	if err := d.kubectl("patch", "-n", ns, "configmap", "webapp-config", "--type=merge", "-p", `{"data":{"message":"Hello, opzero"}}`); err != nil {
		return err
	}
	after, err := d.waitPods(ctx, before)
	if err != nil {
		return err
	}
	d.note("pods restarted %s after the edit (cold start included): %s -> %s", since(t), strings.Join(before, ", "), strings.Join(after, ", "))
	if err := poll(ctx, func() bool { return d.c.Get(ctx, key, cw) == nil && cw.Status.Restarts == 1 }); err != nil {
		return fmt.Errorf("status not updated: %w", err)
	}
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "configwatchers")
	fmt.Println()
	_ = d.kubectl("get", "-n", ns, "events", "--field-selector", "reason=Restarted", "-o", "custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message")
	if err := d.waitZero(ctx); err != nil {
		return err
	}
	d.say("Events delivered by the ApiServerSource adapter: %d (%d skipped by generation: the operator's own status writes); cold starts: %d",
		d.delivered.Load(), d.skipped.Load(), d.act.ColdStarts.Load())
	d.note("total %s", since(d.t0))
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

func (d *demo) startOperator(ctx context.Context, root string) (int, error) {
	d.say("The operator: go build ./examples/configwatcher, --mode=serverless behind a scale-to-zero activator (idle %s)", idle)
	exe := filepath.Join(d.dir, "configwatcher")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, "./examples/configwatcher")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building the operator: %w\n%s", err, out)
	}
	// Deliveries are authenticated as with Knative's OIDC feature: the
	// adapter sends a token for its service account with this audience.
	sa := &corev1.ServiceAccount{}
	sa.Namespace, sa.Name = ns, "configwatcher-source"
	if err := d.c.Create(ctx, sa); err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(d.dir, "operator.log"))
	if err != nil {
		return 0, err
	}
	d.act = activator.New(activator.Options{Idle: idle, Command: func() *exec.Cmd {
		cmd := exec.Command(exe, "--mode=serverless", "--audience=configwatcher",
			"--allowed-senders=system:serviceaccount:"+ns+":configwatcher-source")
		cmd.Env = []string{"KUBECONFIG=" + d.kubeconfig}
		cmd.Stdout, cmd.Stderr = logf, logf
		return cmd
	}, OnEvent: func(what string, took time.Duration) {
		switch what {
		case "cold-start":
			d.coldAt = time.Now()
			d.note("activator: an event arrived, 0 instances -> starting the operator (cold start #%d)", d.act.ColdStarts.Load())
		case "ready":
			d.note("activator: operator ready %s after exec; buffered events delivered", took.Round(time.Millisecond))
		case "scaled-to-zero":
			d.note("activator: idle for %s -> scaled to zero (SIGTERM, drained, exit 0); 0 instances", idle)
		}
	}})
	go d.act.Run(ctx)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go http.Serve(l, d.act)
	d.note("0 operator processes; the activator holds its URL %s", "http://"+l.Addr().String())
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (d *demo) startAdapter(ctx context.Context, port int) error {
	d.say("Knative's real ApiServerSource adapter (knative.dev/eventing v0.50.0), Resource mode: ConfigWatchers and ConfigMaps, OIDC tokens")
	target, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		d.delivered.Add(1)
		h := resp.Request.Header
		d.deliveries.Add(fmt.Sprintf("%s %s/%s -> %d %s", h.Get("Ce-Type"), h.Get("Ce-Kind"), h.Get("Ce-Name"), resp.StatusCode, resp.Header.Get("Opzero-Result")))
		if strings.HasPrefix(resp.Header.Get("Opzero-Result"), "skipped") {
			d.skipped.Add(1)
		}
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(l, proxy)
	alog, err := os.Create(filepath.Join(d.dir, "adapter.log"))
	if err != nil {
		return err
	}
	a, err := knative.StartApiServerSource(ctx, knative.ApiServerSourceConfig{
		Log: alog, Name: "configwatcher", Audience: "configwatcher", OIDCServiceAccount: "configwatcher-source", Namespaces: []string{ns}, Mode: "Resource", Kubeconfig: d.kubeconfig,
		Sink: "http://" + l.Addr().String(),
		Resources: []knative.Resource{
			{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers"},
			{Version: "v1", Resource: "configmaps"},
		},
	})
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); a.Stop() }()
	// It sends nothing for what it lists at start: wait until its watch
	// delivers an event before the scenario begins.
	t := time.Now()
	canary := &corev1.ConfigMap{}
	canary.Namespace, canary.Name = ns, "adapter-canary"
	if err := poll(ctx, func() bool {
		canary.ResourceVersion, canary.Data = "", map[string]string{"t": time.Now().String()}
		if d.c.Create(ctx, canary) != nil {
			_ = d.c.Update(ctx, canary)
		}
		return d.delivered.Load() > 0
	}); err != nil {
		return fmt.Errorf("the adapter delivered nothing: %w", err)
	}
	// Each kind has its own reflector; the ConfigWatchers' may start a moment
	// after the ConfigMaps' (its first list goes through a fresh dynamic client).
	time.Sleep(time.Second)
	d.note("watching namespace %s (first event after %s, a canary ConfigMap), sink -> the activator; adapter pid %d", ns, since(t), a.PID())
	return d.waitZero(ctx)
}

func (d *demo) kubectl(args ...string) error {
	fmt.Printf("    $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(d.bin, "kubectl"), append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (d *demo) operatorLog() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "operator.log"))
	a, _ := os.ReadFile(filepath.Join(d.dir, "adapter.log"))
	return string(b) + "\nadapter log:\n" + string(a) + "\ndeliveries:\n" + d.deliveries.String()
}

// lines is a log of one-line records, safe for concurrent use.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) Add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, s)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.l, "\n")
}

// waitZero waits until the activator has scaled the operator to zero.
func (d *demo) waitZero(ctx context.Context) error {
	return poll(ctx, func() bool { return d.act.Instances() == 0 })
}
