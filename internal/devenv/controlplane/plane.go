package controlplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configures Up. Zero ports are replaced by free ones.
type Options struct {
	// Dir is the state folder: logs, keys, etcd data, kubeconfig, state.json.
	Dir string
	// BinDir is the --bin-dir flag: the folder that holds etcd,
	// kube-apiserver and kube-controller-manager. Empty means the lookup of
	// package pinned: $OPZERO_BIN_DIR, $KUBEBUILDER_ASSETS, the user cache
	// (built there on first use, with progress written to Progress).
	BinDir string

	APIServerPort         int
	EtcdPort              int
	EtcdPeerPort          int
	ControllerManagerPort int

	// Address is the API server's bind and advertise address (the
	// kubernetes Service's endpoint); empty means 127.0.0.1. A cluster's
	// node reaches the API server there.
	Address string
	// Controllers are kube-controller-manager's --controllers; empty means
	// the few an operator needs without a node (see kcmControllers).
	Controllers []string
	// APIServerArgs are added to kube-apiserver's flags.
	APIServerArgs []string

	// NoControllerManager skips kube-controller-manager (no garbage
	// collection, no ReplicaSets, no default ServiceAccounts).
	NoControllerManager bool
	// DieWithParent makes the kernel kill the components when the calling
	// process dies (tests); otherwise they outlive it (the CLI).
	DieWithParent bool
	// Profiling serves the API server's /debug/pprof (bench/suite -pprof
	// reads its CPU profile); off otherwise.
	Profiling bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// StartTimeout bounds each component's start; zero means one minute.
	StartTimeout time.Duration
}

// State is what state.json holds: enough for Down and Status to find and
// stop exactly what Up started.
type State struct {
	Dir        string     `json:"dir"`
	Server     string     `json:"server"`
	Kubeconfig string     `json:"kubeconfig"`
	Issuer     string     `json:"serviceAccountIssuer"`
	EtcdURL    string     `json:"etcd"`
	StartedAt  time.Time  `json:"startedAt"`
	Processes  []*Process `json:"processes"`
}

// Plane is a running (or recorded) control plane.
type Plane struct {
	State
	// Config reaches the API server as an admin (system:masters).
	Config *rest.Config
}

const stateFile = "state.json"

// Up starts a control plane in opts.Dir and returns it once every component
// is ready. On any error it stops what it started.
func Up(ctx context.Context, opts Options) (_ *Plane, err error) {
	if opts.Dir == "" {
		return nil, errors.New("controlplane: Options.Dir (the state folder) is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := checkNoPlane(dir); err != nil {
		return nil, err
	}
	u, err := newUpper(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = u.plane.stop()
		}
	}()
	for _, step := range []func(context.Context) error{u.startEtcd, u.startAPIServer, u.startControllerManager} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	u.plane.StartedAt = time.Now()
	return u.plane, u.plane.save()
}

// checkNoPlane refuses a state folder that records another plane, running
// or not, with a message that says what to do.
func checkNoPlane(dir string) error {
	p, err := Load(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state folder %s holds an unreadable %s (%v): remove the folder or run `opzero controlplane down --dir %s`", dir, stateFile, err, dir)
	}
	for _, pr := range p.Processes {
		if pr.alive() {
			return fmt.Errorf("a control plane already runs from %s (%s pid %d, API server %s): use it (export KUBECONFIG=%s), "+
				"stop it with `opzero controlplane down --dir %s`, or choose another --dir", dir, pr.Name, pr.PID, p.Server, p.Kubeconfig, dir)
		}
	}
	return fmt.Errorf("state folder %s is left from a control plane that no longer runs (stopped with --keep, or killed): "+
		"remove it with `opzero controlplane down --dir %s`, or choose another --dir", dir, dir)
}

// Load reads the state a previous Up recorded in dir.
func Load(dir string) (*Plane, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	p := &Plane{}
	if err := json.Unmarshal(b, &p.State); err != nil {
		return nil, err
	}
	if p.Kubeconfig != "" {
		if cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig); err == nil {
			p.Config = cfg
		}
	}
	return p, nil
}

func (p *Plane) save() error {
	b, err := json.MarshalIndent(p.State, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(p.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(p.Dir, stateFile))
}

// Stop stops the components in reverse start order. Unless keep, it then
// removes the state folder.
func (p *Plane) Stop(keep bool) error {
	if err := p.stop(); err != nil {
		return err
	}
	if keep {
		return nil
	}
	return os.RemoveAll(p.Dir)
}

func (p *Plane) stop() error {
	var errs []error
	for i := len(p.Processes) - 1; i >= 0; i-- {
		errs = append(errs, p.Processes[i].stop(10*time.Second))
	}
	return errors.Join(errs...)
}

// Down stops the plane recorded in dir and, unless keep, removes dir. A
// folder without state.json is reported, not removed.
func Down(dir string, keep bool) (*Plane, error) {
	p, err := Load(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no control plane recorded in %s (no %s): nothing to stop", dir, stateFile)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return p, p.Stop(keep)
}

// ComponentStatus is one line of Status.
type ComponentStatus struct {
	Name     string
	PID      int
	Running  bool
	RSSBytes int64
	Log      string
}

// Status reports each recorded component: running or not, and its RSS.
func (p *Plane) Status() []ComponentStatus {
	out := make([]ComponentStatus, 0, len(p.Processes))
	for _, pr := range p.Processes {
		s := ComponentStatus{Name: pr.Name, PID: pr.PID, Log: pr.Log, Running: pr.alive()}
		if s.Running {
			s.RSSBytes = pr.rssBytes()
		}
		out = append(out, s)
	}
	return out
}

// writeKubeconfig writes an admin kubeconfig for server, trusting caFile.
func writeKubeconfig(file, server, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("reading the API server's certificate: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["opzero"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["opzero-admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["opzero"] = &clientcmdapi.Context{Cluster: "opzero", AuthInfo: "opzero-admin", Namespace: "default"}
	cfg.CurrentContext = "opzero"
	return clientcmd.WriteToFile(*cfg, file)
}

// waitHTTP polls url until it answers 200 (with an optional bearer token),
// the process exits, or the timeout passes.
func waitHTTP(ctx context.Context, pr *Process, url, token string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // readiness probe on loopback only
	}}
	return poll(ctx, pr, timeout, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// poll calls ready every 50 ms until it is true; it fails early, with the
// end of the component's log, if the process exits.
func poll(ctx context.Context, pr *Process, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		if !pr.alive() {
			return fmt.Errorf("%s exited during start; the end of its log (%s):\n%s", pr.Name, pr.Log, logTail(pr.Log, 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s; the end of its log (%s):\n%s", pr.Name, timeout, pr.Log, logTail(pr.Log, 15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func url(scheme string, port int, path string) string {
	return scheme + "://127.0.0.1:" + strconv.Itoa(port) + path
}
