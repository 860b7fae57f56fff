package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// The cluster's fixed names and addresses (one cluster per machine).
const (
	NetNS    = "opzero-node" // the node's network namespace
	NodeName = "opzero-node"
	hostVeth = "opz-host"
	nodeVeth = "opz-node"
	bridge   = "opz0"

	HostIP      = "10.243.0.1" // the host's end of the veth: the API server
	NodeIP      = "10.243.0.2" // the node's end: kubelet, kube-proxy
	linkPrefix  = 30
	PodRange    = "10.244.0.0/16" // blackholed beyond the node's bridge
	NodePodCIDR = "10.244.0.0/24" // the bridge's
	bridgeIP    = "10.244.0.1"
	// ServiceRange is the control plane's --service-cluster-ip-range.
	ServiceRange = "10.96.0.0/16"
	DNSServiceIP = "10.96.0.10"
)

// DefaultDir is the state folder when Options.Dir is empty.
const DefaultDir = "/var/lib/opzero/cluster"

// Options configures Up.
type Options struct {
	// Dir is the state folder; empty means DefaultDir.
	Dir string
	// BinDir is the --bin-dir flag (package pinned); empty means the usual
	// lookup, building what the cache lacks.
	BinDir string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// Knative installs Knative Serving and Eventing (v0.50.0, their
	// release YAMLs with images built here) after CoreDNS.
	Knative bool
	// KeepOnFailure leaves what a failed Up made running, for a look
	// (`opzero cluster down` removes it).
	KeepOnFailure bool
	// Timeout bounds each wait (a component, the node, CoreDNS); zero means
	// three minutes.
	Timeout time.Duration
}

// State is what state.json holds: everything Up made, for Down.
type State struct {
	Dir        string                  `json:"dir"`
	Kubeconfig string                  `json:"kubeconfig"`
	Server     string                  `json:"server"`
	PlaneDir   string                  `json:"planeDir"`
	Kubectl    string                  `json:"kubectl"`   // the pinned kubectl
	Processes  []*controlplane.Process `json:"processes"` // containerd, kubelet, kube-proxy, kube-scheduler
	// Sysctls are kernel settings as they were before Up (file under
	// /proc/sys -> value), put back by Down.
	Sysctls map[string]string `json:"sysctls"`
	// Created are folders outside Dir that did not exist before Up and
	// that the node's programs make (containerd's shim sockets, libcni's
	// cache, kubelet's container log links); Down removes them.
	Created []string `json:"created"`
	// HostRoutes are the host's routes Up added (ip route arguments).
	HostRoutes [][]string         `json:"hostRoutes"`
	Images     map[string]string  `json:"images"` // name -> reference
	StartedAt  time.Time          `json:"startedAt"`
	Timings    map[string]float64 `json:"timings,omitempty"` // step -> seconds
}

// Cluster is a running (or recorded) cluster.
type Cluster struct {
	State
	// Config reaches the API server as the admin.
	Config *rest.Config
}

const stateFile = "state.json"

// ErrUnsupported wraps every reason Check gives that this machine (or
// user) cannot run a cluster: tests skip on it.
var ErrUnsupported = errors.New("this machine cannot run opzero's cluster")

// Up starts the cluster and returns it once the node is Ready and CoreDNS
// is available. On any error it removes what it made (Down).
func Up(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	if err := Check(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		return nil, fmt.Errorf("a cluster is recorded in %s: use it (export KUBECONFIG=%s), or remove it with `opzero cluster down`", dir, filepath.Join(dir, "kubeconfig"))
	}
	if err := checkLeftovers(ctx, dir); err != nil {
		return nil, err
	}
	u := &upper{opts: opts, c: &Cluster{State: State{Dir: dir, Images: map[string]string{}, Timings: map[string]float64{}}}}
	if err := u.findBinaries(ctx); err != nil {
		return nil, err
	}
	u.record()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && opts.KeepOnFailure {
			fmt.Fprintf(opts.Progress, "cluster up failed; what it made is kept (KUBECONFIG=%s), `opzero cluster down` removes it\n", u.c.Kubeconfig)
			return
		}
		if err != nil {
			fmt.Fprintf(opts.Progress, "cluster up failed; removing what it made\n")
			if derr := u.c.down(io.Discard); derr != nil {
				err = errors.Join(err, fmt.Errorf("and removing what it made: %w", derr))
			}
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"network", u.network},
		{"control plane", u.controlPlane},
		{"containerd", u.containerd},
		{"images", u.images},
		{"kubelet", u.kubelet},
		{"kube-proxy and kube-scheduler", u.proxyAndScheduler},
		{"CoreDNS", u.coreDNS},
	}
	if opts.Knative {
		steps = append(steps, struct {
			name string
			run  func(context.Context) error
		}{"Knative", u.knative})
	}
	for _, step := range steps {
		t0 := time.Now()
		if err := step.run(ctx); err != nil {
			return nil, fmt.Errorf("cluster up, %s: %w", step.name, err)
		}
		u.c.Timings[step.name] = time.Since(t0).Seconds()
		if err := u.c.save(); err != nil {
			return nil, err
		}
	}
	u.c.StartedAt = time.Now()
	return u.c, u.c.save()
}

// Load reads the cluster recorded in dir (empty means DefaultDir).
func Load(dir string) (*Cluster, error) {
	if dir == "" {
		dir = DefaultDir
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	if err := json.Unmarshal(b, &c.State); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	if c.Kubeconfig != "" {
		if cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err == nil {
			c.Config = cfg
		}
	}
	return c, nil
}

// save writes state.json at once (aside, then renamed): Down must find
// whatever Up made, even if Up is killed halfway.
func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c.State, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.Dir, stateFile))
}

// Down removes the cluster recorded in dir (empty means DefaultDir) and
// everything it made, reporting each step to progress. A folder without a
// recorded cluster is an error that says so.
func Down(dir string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	c, err := Load(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no cluster recorded in %s (no %s): nothing to stop", dir, stateFile)
	}
	if err != nil {
		return err
	}
	return c.down(progress)
}

// ComponentStatus is one line of Status.
type ComponentStatus struct {
	Name     string
	PID      int
	Running  bool
	RSSBytes int64
	Log      string
}

// Status reports the control plane's and the node's processes.
func (c *Cluster) Status() []ComponentStatus {
	var out []ComponentStatus
	if p, err := controlplane.Load(c.PlaneDir); err == nil {
		for _, s := range p.Status() {
			out = append(out, ComponentStatus(s))
		}
	}
	for _, pr := range c.Processes {
		s := ComponentStatus{Name: pr.Name, PID: pr.PID, Log: pr.Log, Running: pr.Alive()}
		if s.Running {
			s.RSSBytes = pr.RSSBytes()
		}
		out = append(out, s)
	}
	return out
}

// upper carries one Up from step to step.
type upper struct {
	opts Options
	c    *Cluster
	bins map[string]string // pinned name -> path
}

func (u *upper) findBinaries(ctx context.Context) error {
	names := []string{pinned.Etcd, pinned.KubeAPIServer, pinned.KubeControllerManager, pinned.Kubectl,
		pinned.Kubelet, pinned.KubeProxy, pinned.KubeScheduler, pinned.CoreDNS, pinned.Pause, pinned.NetCheck, pinned.ImageBuild}
	paths, err := pinned.Resolver{Dir: u.opts.BinDir, Progress: u.opts.Progress}.Find(ctx, names...)
	if err != nil {
		return err
	}
	u.bins = map[string]string{}
	for i, n := range names {
		u.bins[n] = paths[i]
	}
	u.c.Kubectl = u.bins[pinned.Kubectl]
	return nil
}

func (u *upper) step(format string, args ...any) {
	fmt.Fprintf(u.opts.Progress, "  "+format+"\n", args...)
}

// start launches a node component, recorded at once so a failure later
// still stops it.
func (u *upper) start(name, netns string, args ...string) (*controlplane.Process, error) {
	path := u.bins[name]
	if name == "containerd" {
		path = "/usr/bin/containerd"
	}
	pr, err := controlplane.StartProcess(controlplane.ProcessSpec{
		Name: name, Path: path, Args: args, NetNS: netns,
		Log: filepath.Join(u.c.Dir, "logs", name+".log"),
	})
	if err != nil {
		return nil, err
	}
	u.c.Processes = append(u.c.Processes, pr)
	return pr, u.c.save()
}

// wait polls ready every 200 ms until it is true, pr exits (when given),
// or the timeout passes; the error carries the end of pr's log.
func (u *upper) wait(ctx context.Context, what string, pr *controlplane.Process, ready func(context.Context) error) error {
	deadline := time.Now().Add(u.opts.Timeout)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if pr != nil && !pr.Alive() {
			return fmt.Errorf("%s exited; the end of its log (%s):\n%s", pr.Name, pr.Log, pr.LogTail(20))
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s not ready after %s: %v", what, u.opts.Timeout, err)
			if pr != nil {
				msg += fmt.Sprintf("; the end of %s's log (%s):\n%s", pr.Name, pr.Log, pr.LogTail(20))
			}
			return errors.New(msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
