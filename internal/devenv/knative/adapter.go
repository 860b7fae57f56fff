package knative

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/devenv/pinned"

	"github.com/opzero/opzero/internal/localport"
)

// Resource is one kind an ApiServerSource watches.
type Resource struct {
	Group, Version, Resource string // e.g. "", "v1", "configmaps"
	// LabelSelector limits the objects watched ("app=demo").
	LabelSelector string
}

// Owner keeps only objects whose controller owner has this kind.
type Owner struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ApiServerSourceConfig is what an ApiServerSource object would tell
// Knative's controller; Start turns it into the adapter's environment.
type ApiServerSourceConfig struct {
	// Name of the source (the adapter requires one).
	Name string
	// Namespace of the source: the adapter's NAMESPACE, where it looks up
	// OIDCServiceAccount; empty means the first of Namespaces, else default.
	Namespace string
	// Namespaces to watch; AllNamespaces watches every namespace.
	Namespaces    []string
	AllNamespaces bool
	Resources     []Resource
	// Mode is "Resource" (the whole object) or "Reference" (default).
	Mode  string
	Owner *Owner
	// Sink is where events are POSTed, e.g. http://127.0.0.1:18080.
	Sink string
	// Kubeconfig of the API server to watch.
	Kubeconfig string
	// Audience and OIDCServiceAccount make the adapter authenticate its
	// deliveries as Knative's OIDC feature does: a TokenRequest token for
	// that service account (in Namespace) with that audience, sent
	// as Authorization: Bearer.
	Audience           string
	OIDCServiceAccount string
	// CEOverrides are extensions added to every event.
	CEOverrides map[string]string
	// ProfilingPort moves the adapter's pprof listener off :8008 (0 picks
	// one from the source name so two adapters do not clash).
	ProfilingPort int
	// MetricsPort is where the adapter serves its Prometheus metrics on
	// 127.0.0.1 (0 picks a free port); Adapter.Probe reads it.
	MetricsPort int
	// Binary is the adapter; empty means apiserver_receive_adapter found
	// by package pinned in BinDir (the --bin-dir flag; empty: the default
	// lookup, built on first use).
	Binary, BinDir string
	// Log receives the adapter's output (nil discards).
	Log io.Writer
}

// sourceConfig mirrors knative.dev/eventing/pkg/adapter/apiserver.Config.
type sourceConfig struct {
	Namespaces    []string `json:"namespaces"`
	AllNamespaces bool     `json:"allNamespaces"`
	Resources     []struct {
		GVR      struct{ Group, Version, Resource string } `json:"gvr"`
		Selector string                                    `json:"selector,omitempty"`
	} `json:"resources"`
	Owner *Owner `json:"owner,omitempty"`
	Mode  string `json:"mode,omitempty"`
}

// Adapter is a running adapter process.
type Adapter struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once

	metricsURL string        // "" when the adapter serves no metrics (mtping)
	gap        chan string   // the log line that showed a gap in a watch
	synced     chan struct{} // closed once every reflector has listed
	watch      *watchLog
}

// StartApiServerSource starts Knative's ApiServerSource receive adapter and
// returns once it has started its watches (see the package caveats).
func StartApiServerSource(ctx context.Context, c ApiServerSourceConfig) (*Adapter, error) {
	if c.Name == "" || c.Sink == "" || c.Kubeconfig == "" || len(c.Resources) == 0 {
		return nil, errors.New("ApiServerSource adapter: Name, Sink, Kubeconfig and at least one Resource are required")
	}
	bin, err := adapterBinary(ctx, c.Binary, c.BinDir, pinned.ApiServerSourceAdapter)
	if err != nil {
		return nil, err
	}
	sc := sourceConfig{Namespaces: c.Namespaces, AllNamespaces: c.AllNamespaces, Owner: c.Owner, Mode: c.Mode}
	if sc.Mode == "" {
		sc.Mode = "Reference"
	}
	for _, r := range c.Resources {
		var w = struct {
			GVR      struct{ Group, Version, Resource string } `json:"gvr"`
			Selector string                                    `json:"selector,omitempty"`
		}{Selector: r.LabelSelector}
		w.GVR.Group, w.GVR.Version, w.GVR.Resource = r.Group, r.Version, r.Resource
		sc.Resources = append(sc.Resources, w)
	}
	if err := waitDiscoverable(ctx, c.Kubeconfig, c.Resources); err != nil {
		return nil, err
	}
	cfgJSON, _ := json.Marshal(sc)
	ns := c.Namespace
	if ns == "" && len(c.Namespaces) > 0 {
		ns = c.Namespaces[0]
	}
	if ns == "" {
		ns = "default"
	}
	metricsPort := c.MetricsPort
	if metricsPort == 0 {
		if metricsPort, err = localport.Free(); err != nil {
			return nil, err
		}
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	obs, _ := json.Marshal(map[string]any{"metrics": map[string]string{"protocol": "prometheus", "endpoint": metricsAddr}})
	env := []string{
		"KUBECONFIG=" + c.Kubeconfig, "NAME=" + c.Name, "NAMESPACE=" + ns,
		"K_SOURCE_CONFIG=" + string(cfgJSON), "K_SINK=" + c.Sink, "K_SINK_TIMEOUT=-1",
		fmt.Sprintf("PROFILING_PORT=%d", profilingPort(c)),
		// Its client-go reflectors log "Caches populated" at level 2: the
		// first per reflector is its start, a later one a relist.
		"K_KLOG_VERBOSITY=2",
		"K_OBSERVABILITY_CONFIG=" + string(obs),
	}
	if c.Audience != "" {
		env = append(env, "K_AUDIENCE="+c.Audience, "K_OIDC_SERVICE_ACCOUNT="+c.OIDCServiceAccount)
	}
	if len(c.CEOverrides) > 0 {
		o, _ := json.Marshal(map[string]any{"extensions": c.CEOverrides})
		env = append(env, "K_CE_OVERRIDES="+string(o))
	}
	reflectors := len(c.Resources)
	if !c.AllNamespaces && len(c.Namespaces) > 1 {
		reflectors *= len(c.Namespaces)
	}
	w := &watchLog{want: reflectors}
	a, err := start(ctx, c.Name, bin, nil, env, c.Log, "STARTING", w)
	if err != nil {
		return nil, err
	}
	a.metricsURL = "http://" + metricsAddr + "/metrics"
	return a, nil
}

// PingConfig configures Knative's multi-tenant PingSource adapter (mtping).
// It schedules every PingSource in the cluster whose status is Ready=True
// and sends to its status.sinkUri (with a token for status.sinkAudience as
// status.auth.serviceAccountName): a local platform writes those statuses.
type PingConfig struct {
	// Kubeconfig of the API server to read PingSources from.
	Kubeconfig string
	// Namespace is its SYSTEM_NAMESPACE and NAMESPACE: it must exist and
	// hold ConfigMaps config-logging and config-observability (EnsurePingNamespace).
	Namespace string
	// ProfilingPort moves the pprof listener off :8008 (0 picks one).
	ProfilingPort int
	// Binary is the adapter; empty means mtping found by package pinned in
	// BinDir (as in ApiServerSourceConfig).
	Binary, BinDir string
	// Log receives the adapter's output (nil discards).
	Log io.Writer
}

// StartPing starts mtping without leader election (--disable-ha) and
// returns once its job runner has started. On SIGTERM it exits at once
// (K_NO_SHUTDOWN_AFTER=59 turns off its wait for the end of the minute).
func StartPing(ctx context.Context, c PingConfig) (*Adapter, error) {
	if c.Kubeconfig == "" || c.Namespace == "" {
		return nil, errors.New("PingSource adapter: Kubeconfig and Namespace are required")
	}
	bin, err := adapterBinary(ctx, c.Binary, c.BinDir, pinned.PingAdapter)
	if err != nil {
		return nil, err
	}
	port := c.ProfilingPort
	if port == 0 {
		port = profilingPort(ApiServerSourceConfig{Name: "mtping/" + c.Namespace})
	}
	env := []string{
		"KUBECONFIG=" + c.Kubeconfig, "SYSTEM_NAMESPACE=" + c.Namespace, "NAMESPACE=" + c.Namespace,
		"NAME=mtping", "K_NO_SHUTDOWN_AFTER=59", "K_SINK_TIMEOUT=-1", fmt.Sprintf("PROFILING_PORT=%d", port),
	}
	return start(ctx, "mtping", bin, []string{"--disable-ha"}, env, c.Log, "Starting job runner", nil)
}

func profilingPort(c ApiServerSourceConfig) int {
	if c.ProfilingPort != 0 {
		return c.ProfilingPort
	}
	h := 0
	for _, r := range c.Name {
		h = h*31 + int(r)
	}
	return 20000 + (h&0x7fffffff)%10000
}

func adapterBinary(ctx context.Context, bin, binDir, name string) (string, error) {
	if bin == "" {
		return pinned.Resolver{Dir: binDir}.FindOne(ctx, name)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s not found at %s: give the path of Knative's %s, or none to use opzero's (`opzero install knative`)", name, bin, name)
	}
	return bin, nil
}

// start runs bin with env and waits until a line of its output contains
// ready, the process exits, or ctx ends. w, if set, reads the reflectors'
// lines of the output.
func start(ctx context.Context, name, bin string, args, env []string, log io.Writer, ready string, w *watchLog) (*Adapter, error) {
	if log == nil {
		log = io.Discard
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	a := &Adapter{Name: name, cmd: cmd, done: make(chan struct{}), gap: make(chan string, 1), synced: make(chan struct{}), watch: w}
	if w == nil {
		close(a.synced)
	}
	seen := make(chan struct{})
	var tail tailBuffer
	go func() {
		s := bufio.NewScanner(pr)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		var once sync.Once
		for s.Scan() {
			line := s.Text()
			fmt.Fprintln(log, line)
			tail.add(line)
			if strings.Contains(line, ready) {
				once.Do(func() { close(seen) })
			}
			if w != nil {
				a.readWatchLine(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() { a.err = cmd.Wait(); pw.Close(); close(a.done) }()
	select {
	case <-seen:
		return a, nil
	case <-a.done:
		return nil, fmt.Errorf("%s exited during start (%v); its last output:\n%s", name, a.err, tail.String())
	case <-ctx.Done():
		a.Stop()
		return nil, fmt.Errorf("%s did not start: %w", name, ctx.Err())
	case <-time.After(30 * time.Second):
		a.Stop()
		return nil, fmt.Errorf("%s did not start within 30s; its last output:\n%s", name, tail.String())
	}
}

// Stop sends SIGTERM and waits for the process to exit (SIGKILL after 5 s).
func (a *Adapter) Stop() {
	a.once.Do(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(5 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	})
}

// Done is closed when the process has exited.
func (a *Adapter) Done() <-chan struct{} { return a.done }

// PID of the adapter process.
func (a *Adapter) PID() int { return a.cmd.Process.Pid }

// tailBuffer keeps the last lines of output for error messages.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lines = append(t.lines, l); len(t.lines) > 20 {
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return "    " + strings.Join(t.lines, "\n    ")
}

// waitDiscoverable waits until API discovery lists every resource. The
// adapter looks its resources up in discovery once, at start, and silently
// skips one it cannot find (resilient mode): a CRD installed a moment ago
// may not be listed yet.
func waitDiscoverable(ctx context.Context, kubeconfig string, resources []Resource) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for _, r := range resources {
		gv := schema.GroupVersion{Group: r.Group, Version: r.Version}.String()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			list, err := dc.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, nil
			}
			for _, ar := range list.APIResources {
				if ar.Name == r.Resource {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("resource %s in %s is not served by the API server (is its CRD installed?): %w", r.Resource, gv, err)
		}
	}
	return nil
}

// EnsurePingNamespace creates namespace ns with the empty ConfigMaps
// config-logging and config-observability that mtping requires.
func EnsurePingNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s for mtping: %w", ns, err)
	}
	for _, name := range []string{"config-logging", "config-observability"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ConfigMap %s/%s for mtping: %w", ns, name, err)
		}
	}
	return nil
}
