package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/devenv/knative"
)

// Options configures Start.
type Options struct {
	// Kubeconfig of the API server (with Knative's CRDs installed); the
	// operators, adapters and processes opzero dev starts use it too.
	Kubeconfig string
	// Objects are the manifests to apply (ReadManifests).
	Objects []*unstructured.Unstructured
	// Namespace is given to namespaced objects without one ("default").
	Namespace string
	// Dir receives one log file per process; required.
	Dir string
	// CacheDir holds the binaries built for ko:// images (DefaultCacheDir).
	CacheDir string
	// BuildDir is where `go build` resolves ko:// import paths: a folder of
	// the module that holds them (default: the working directory).
	BuildDir string
	// Prebuilt, if set, gives the command of an image that needs no build
	// (opzero's own images, which the CLI runs itself): the executable and
	// leading arguments; ok false builds the image with `go build`.
	Prebuilt func(pkg string) (argv []string, ok bool)
	// BinDir is the --bin-dir flag for Knative's adapters (package pinned;
	// empty: the default lookup).
	BinDir string
	// Port is the local port of the first Knative Service's URL, the next
	// Service gets Port+1, ...; 0 picks free ports.
	Port int
	// Idle, if set, overrides every Service's scale-to-zero period.
	Idle time.Duration
	// ColdStartDelay holds each Service's cold start until this long
	// after the process's exec (activator.Options.ColdStartDelay): 0, a
	// local process start, is a floor, not a forecast of a real node.
	ColdStartDelay time.Duration
	// Out receives one line per step and per scaling event (nil discards).
	Out io.Writer
	// Events receives the same as machine-readable Events (nil discards;
	// events.go).
	Events *EventWriter
	// Verbose adds one line per delivery to Out (DeliveryLine).
	Verbose bool
	// Env is added to the environment of every operator and ko://
	// Deployment process, over the manifests' (NAME=value; e.g. the OTEL_*
	// variables of `opzero dev --otel`).
	Env []string
}

// Platform is Knative's part, played locally for the applied manifests.
type Platform struct {
	opts       Options
	kubeconfig string
	cfg        *rest.Config
	cs         kubernetes.Interface
	apply      *applier
	build      *builder
	localURLs  map[string]string // in-cluster URL -> local URL
	names      clusterNames      // in-cluster Service names -> local addresses
	namesURL   string            // the proxy that answers them: processes' HTTP_PROXY
	// moved are the ports a local command's arguments bind (its probe's,
	// its containerPorts, those its Services target) that an earlier
	// local command of the session binds too, by Deployment
	// (namespace/name): port -> the free local port it binds instead,
	// planned before it starts (nameCommandServices) so that its
	// Services' names reach it there. The first keeps its ports.
	moved map[string]map[int]int

	Services []*Service
	Sources  []string // "ApiServerSource ns/name -> sink", ...

	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	adaptersMu sync.Mutex      // adapters, adapterOf, stopping and Sources, once Start has returned
	adapters   []*supervised   // Knative's adapters
	adapterOf  map[string]bool // ApiServerSources (ns/name) whose adapter runs
	stopping   bool
	procs      []*supervised // ko:// Deployments
	// webhookServers are the Deployments behind webhook Services, by
	// namespace/name; webhookConfigs the configurations pointed at them
	// (webhooks.go).
	webhookServers map[string]*webhookServer
	webhookConfigs []webhookConfig
	// issued are the Secrets dev made for cert-manager's Certificates
	// (namespace/name: file: content), for the processes that mount them.
	issued   map[string]map[string][]byte
	pingMu   sync.Mutex
	pings    []ping // PingSources, for a sweep after an adapter's gap
	servers  []*http.Server
	stopOnce sync.Once
	readyMu  sync.Mutex
	ready    []made // statuses written Ready=True, undone by Stop
}

func (p *Platform) say(format string, args ...any) {
	if p.opts.Out != nil {
		fmt.Fprintf(p.opts.Out, format+"\n", args...)
	}
}

// Start applies the manifests and plays Knative's part for them: an
// activator per Knative Service, Knative's real adapters for ApiServerSources
// and PingSources, a process per Deployment with a ko:// image (the wakeup
// source), and the statuses Knative's controllers would write. On error it
// stops what it started. Stop (or the end of ctx) tears everything down.
func Start(ctx context.Context, o Options) (_ *Platform, err error) {
	if o.Dir == "" || o.Kubeconfig == "" {
		return nil, errors.New("dev: Options.Dir and Options.Kubeconfig are required")
	}
	// Processes run in folders of their own (an interpreted hook in its
	// files' folder): a relative Dir would name another folder from there.
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, err
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir()
	}
	if o.BuildDir == "" {
		if o.BuildDir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	p := &Platform{opts: o, kubeconfig: o.Kubeconfig, localURLs: map[string]string{},
		build: &builder{dir: o.CacheDir, buildDir: o.BuildDir, prebuilt: o.Prebuilt}}
	if p.cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig); err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", o.Kubeconfig, err)
	}
	if p.cs, err = kubernetes.NewForConfig(p.cfg); err != nil {
		return nil, err
	}
	if p.apply, err = newApplier(p.cfg, o.Namespace); err != nil {
		return nil, err
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	// Everything that can be checked before touching the cluster is.
	listeners, err := p.plan(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.serveNames(); err != nil {
		closeAll(listeners)
		return nil, err
	}
	defer func() {
		if err != nil {
			closeAll(listeners) // some may not be served yet
		}
	}()
	t := time.Now()
	if err := p.apply.applyAll(ctx, p.opts.Objects); err != nil {
		return nil, err
	}
	p.say("applied %d objects (server-side apply, field manager %s) in %s", len(p.opts.Objects), FieldManager, since(t))
	pruned, err := p.prune(ctx)
	if err != nil {
		return nil, err
	}
	if len(pruned) > 0 {
		p.say("deleted %d objects an earlier session applied for another wiring of these operators: %s", len(pruned), strings.Join(pruned, ", "))
	}
	// mtping's namespace exists before any ApiServerSource adapter watches
	// ConfigMaps, so its creation sends no event.
	for _, u := range p.opts.Objects {
		if isKind(u, "sources.knative.dev", "PingSource") {
			if err := knative.EnsurePingNamespace(ctx, p.cs, PingNamespace); err != nil {
				return nil, err
			}
			break
		}
	}
	for _, step := range []func(context.Context, []net.Listener) error{p.startServices, p.startBrokers, p.startApiServerSources, p.startPingSources, p.startDeployments} {
		if err := step(ctx, listeners); err != nil {
			return nil, err
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.ctx.Done():
		}
	}()
	p.emitReady()
	if len(p.Services) > 0 {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.watchApiServerSources() }()
	}
	return p, nil
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }

// plan validates the Services and ko:// Deployments, reserves each
// Service's port and builds every ko:// image, before anything is applied.
func (p *Platform) plan(ctx context.Context) ([]net.Listener, error) {
	var listeners []net.Listener
	var pkgs []string
	n := 0
	for _, u := range p.opts.Objects {
		switch {
		case isKind(u, "serving.knative.dev", "Service"):
			if u.GetNamespace() == "" {
				u.SetNamespace(p.opts.Namespace)
			}
			s, err := parseService(u)
			if err != nil {
				closeAll(listeners)
				return nil, err
			}
			addr := "127.0.0.1:0"
			if p.opts.Port != 0 {
				addr = "127.0.0.1:" + strconv.Itoa(p.opts.Port+n)
			}
			n++
			l, err := net.Listen("tcp", addr)
			if err != nil {
				closeAll(listeners)
				return nil, fmt.Errorf("Knative Service %s: its local URL's address %s is in use or not available (another opzero dev? `ss -ltnp` shows what listens; choose another --port, or 0 for free ports): %w", key(u), addr, err)
			}
			listeners = append(listeners, l)
			local := "http://" + l.Addr().String()
			for _, c := range s.clusterURLs() {
				p.localURLs[c] = local
			}
			p.names.add(s.Name, s.NS, 80, l.Addr().String())
			if s.Pkg != "" {
				pkgs = append(pkgs, s.Pkg)
			}
		case isKind(u, "apps", "Deployment"):
			if pkg, ok, err := deploymentImage(u); err != nil {
				closeAll(listeners)
				return nil, err
			} else if ok {
				pkgs = append(pkgs, pkg)
			}
			if _, err := localCommand(u, "Deployment "+key(u)); err != nil {
				closeAll(listeners)
				return nil, err
			}
		}
	}
	if err := p.nameCommandServices(); err != nil {
		closeAll(listeners)
		return nil, err
	}
	if err := p.planWebhooks(); err != nil {
		closeAll(listeners)
		return nil, err
	}
	for _, pkg := range pkgs {
		t := time.Now()
		argv, err := p.build.build(ctx, pkg)
		if err != nil {
			closeAll(listeners)
			return nil, err
		}
		if filepath.Dir(argv[0]) == p.build.dir {
			p.say("built ko://%s in %s", pkg, since(t))
		} else {
			p.say("ko://%s runs as %s (no build)", pkg, strings.Join(argv, " "))
		}
	}
	return listeners, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

func isKind(u *unstructured.Unstructured, group, kind string) bool {
	gvk := u.GroupVersionKind()
	return gvk.Group == group && gvk.Kind == kind
}

// deploymentImage reports the import path of a Deployment whose single
// container has a ko:// image (opzero dev runs those as processes); other
// Deployments are only applied.
func deploymentImage(u *unstructured.Unstructured) (string, bool, error) {
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		m, _ := c.(map[string]any)
		if img, _ := m["image"].(string); strings.HasPrefix(img, KoPrefix) {
			if len(cs) != 1 {
				return "", false, fmt.Errorf("Deployment %s: a ko:// image in one of %d containers; opzero dev runs Deployments with one container", key(u), len(cs))
			}
			pkg, err := importPath(img, "Deployment "+key(u))
			return pkg, err == nil, err
		}
	}
	return "", false, nil
}

// Stop stops the sources first (no new events), then the operators (they
// drain) and the other processes, and returns once all have exited; then it
// marks what it had made Ready not ready (reason DevSessionEnded) and
// removes the local URLs from the statuses.
func (p *Platform) Stop() {
	p.stopOnce.Do(func() {
		p.adaptersMu.Lock()
		p.stopping = true
		p.adaptersMu.Unlock()
		for _, a := range p.adapterList() {
			a.stop()
		}
		p.cancel() // activators stop their instances
		p.wg.Wait()
		for _, s := range p.servers {
			s.Close()
		}
		var wg sync.WaitGroup
		for _, s := range p.procs {
			wg.Add(1)
			go func() { defer wg.Done(); s.stop() }() // SIGTERM to all at once, SIGKILL after 10 s
		}
		wg.Wait()
		p.deleteWebhookConfigs()
		p.markEnded()
	})
}

// Done is closed once Stop has begun.
func (p *Platform) Done() <-chan struct{} { return p.ctx.Done() }

// logFile opens the log of one process in Options.Dir (made if need be).
func (p *Platform) logFile(name string) (*os.File, error) {
	if err := os.MkdirAll(p.opts.Dir, 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(p.opts.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// LogPath is the log file of the named process (see the names Start prints).
func (p *Platform) LogPath(name string) string { return filepath.Join(p.opts.Dir, name+".log") }

// PIDs of every process the platform runs now: adapters, always-on
// processes and operator instances.
func (p *Platform) PIDs() []int {
	var out []int
	for _, s := range append(p.adapterList(), p.procs...) {
		out = append(out, s.current().PID())
	}
	for _, s := range p.Services {
		out = append(out, s.Activator.PIDs()...)
	}
	return out
}

// DeploymentPID is the pid of the process dev runs now for the Deployment
// namespace/name (0: none).
func (p *Platform) DeploymentPID(namespace, name string) int {
	for _, s := range p.procs {
		if s.what == "Deployment "+namespace+"/"+name {
			return s.current().PID()
		}
	}
	return 0
}
