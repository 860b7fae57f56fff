package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/proc"
)

// measure starts wiring for ops operators, lets it settle (-worth-settle
// after ready: the controller-runtime managers' caches synced, opzero dev's
// adapters listed) and reads the always-on processes' memory. A wiring that
// cannot run yet (the hub) gives a note instead.
func (w *worthPart) measure(ctx context.Context, wiring string, ops int) ([]procMem, string, error) {
	switch wiring {
	case wCR, wCRMeta:
		return w.measureClassic(ctx, wiring == wCRMeta, ops)
	}
	if wiring == wHub && w.hubNote != "" {
		return nil, w.hubNote, nil
	}
	if err := w.clearOtherWiring(ctx, wiring); err != nil {
		return nil, "", err
	}
	s, err := w.startDev(ctx, fmt.Sprintf("%s-%d-%d", strings.Fields(wiring)[0], ops, w.cms), w.manifests[wiring][ops])
	if err != nil && wiring == wHub { // the newest wiring: its failure is a row's note, not the part's end
		return nil, "hub: opzero dev failed: " + firstLine(err.Error()), nil
	}
	if err != nil {
		return nil, "", err
	}
	defer s.stop()
	second := 0 // the hub's second replica
	if wiring == wHub {
		// Measured once it serves: every Subscription Ready (its watches
		// and referrer index started), then the settle time as for the rest.
		if err := w.subscriptionsReady(ctx, ops); err != nil {
			return nil, "hub: " + firstLine(err.Error()), nil
		}
		pid, stop, err := w.secondHub(s.cmd.Process.Pid)
		if err != nil {
			return nil, "hub: " + firstLine(err.Error()), nil
		}
		defer stop()
		second = pid
	}
	time.Sleep(worthSettle)
	procs := alwaysOn(s.cmd.Process.Pid)
	if len(procs) == 0 {
		return nil, "", fmt.Errorf("no always-on process found under opzero dev (pid %d)", s.cmd.Process.Pid)
	}
	if second != 0 {
		rss, hwm := proc.Mem(second)
		procs = append(procs, procMem{what: hubReplica2, shared: true, rss: rss, hwm: hwm})
	}
	return procs, "", nil
}

// The hub's two replicas (opzero manifests writes replicas: 2): the one
// opzero dev runs holds every bucket (it started first), the second waits.
const (
	hubReplica1 = "hub, replica 1 (serves)"
	hubReplica2 = "hub, replica 2 (standby)"
)

// secondHub starts the hub's second replica (devtest.SecondHub) beside
// the one opzero dev (devPid) runs.
func (w *worthPart) secondHub(devPid int) (pid int, stop func(), err error) {
	return devtest.SecondHub(hubProcess(devPid), filepath.Join(w.dir, fmt.Sprintf("hub-replica-2-%d.log", time.Now().UnixNano())))
}

// hubProcess is the hub replica opzero dev (devPid) runs, 0 if none.
func hubProcess(devPid int) int {
	hub := 0
	for _, p := range proc.Descendants(devPid) {
		if argv := proc.Argv(p); len(argv) > 0 && strings.Contains(strings.Join(argv, " "), "opzero-hub") {
			hub = p
		}
	}
	return hub
}

// clearOtherWiring deletes what the other serverless wiring's session left
// in the operators' namespaces: opzero dev starts an adapter for every
// ApiServerSource it finds to an operator it runs, so a hub session after a
// Knative one ran the Knative one's adapters too (measured: the hub row
// with two stale adapters).
func (w *worthPart) clearOtherWiring(ctx context.Context, wiring string) error {
	stale := []schema.GroupVersionKind{{Group: "sources.knative.dev", Version: "v1", Kind: "ApiServerSource"},
		{Group: "sources.knative.dev", Version: "v1", Kind: "PingSource"}}
	if wiring == wKnative {
		stale = []schema.GroupVersionKind{{Group: "opzero.dev", Version: "v1alpha1", Kind: "Subscription"}}
	}
	for i := range worthOps {
		for _, gvk := range stale {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := w.c.DeleteAllOf(ctx, u, client.InNamespace(opNamespace(i))); err != nil && !meta.IsNoMatchError(err) {
				return fmt.Errorf("deleting the other wiring's %ss: %w", gvk.Kind, err)
			}
		}
		if wiring == wHub {
			d := &unstructured.Unstructured{}
			d.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
			if err := w.c.DeleteAllOf(ctx, d, client.InNamespace(opNamespace(i)),
				client.MatchingLabels{"app.kubernetes.io/component": "wakeup-source"}); err != nil {
				return fmt.Errorf("deleting the Knative wiring's wakeup sources: %w", err)
			}
		}
	}
	return nil
}

// measureClassic starts ops controller-runtime managers (bench/crbaseline),
// each with its own caches, as ops classic operators would run.
func (w *worthPart) measureClassic(ctx context.Context, metadataOnly bool, ops int) ([]procMem, string, error) {
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGTERM)
			_ = c.Wait()
		}
	}()
	ready := make(chan int, ops)
	for i := range ops {
		var args []string
		if metadataOnly {
			args = append(args, "--metadata-only")
		}
		cmd := exec.CommandContext(ctx, w.crbaseline, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+w.kubeconfig)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, "", err
		}
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		cmds = append(cmds, cmd)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "READY" {
					ready <- i
				}
			}
		}()
	}
	for range ops {
		select {
		case <-ready:
		case <-time.After(5 * time.Minute):
			return nil, "", fmt.Errorf("a controller-runtime manager was not ready (caches synced) within 5 minutes")
		}
	}
	time.Sleep(worthSettle)
	var procs []procMem
	for _, c := range cmds {
		rss, hwm := proc.Mem(c.Process.Pid)
		procs = append(procs, procMem{what: "manager", rss: rss, hwm: hwm})
	}
	return procs, "", nil
}

// alwaysOn finds the processes under opzero dev (pid) that run while the
// operators are at zero, by what /proc says they are: Knative's
// ApiServerSource adapters (their environment names the source), mtping,
// the wakeup sources and the hub. Operator instances are left out.
func alwaysOn(pid int) []procMem {
	var out []procMem
	for _, p := range proc.Descendants(pid) {
		argv := proc.Argv(p)
		if len(argv) == 0 {
			continue
		}
		env := proc.Env(p)
		base := filepath.Base(argv[0])
		var pm procMem
		switch {
		case strings.Contains(base, "apiserver_receive_adapter"):
			pm.what = "adapter " + strings.TrimPrefix(env["NAME"], "configwatcher-")
		case strings.Contains(base, "mtping"):
			pm.what, pm.shared = "mtping", true
		case strings.Contains(strings.Join(argv, " "), "opzero-hub") || (len(argv) > 1 && argv[1] == "hub"):
			pm.what, pm.shared = hubReplica1, true
		case strings.Contains(strings.Join(argv, " "), "wakeup-source"):
			pm.what = "wakeup source"
		default:
			continue // an operator instance, or a helper of dev's
		}
		pm.rss, pm.hwm = proc.Mem(p)
		out = append(out, pm)
	}
	return out
}

// devSession is `opzero dev -f` running the manifests, as a user runs it.
type devSession struct {
	cmd    *exec.Cmd
	events string // its --events=json stream
	gone   chan struct{}
}

// startDev runs opzero dev on the part's plane with the operators' idle
// period at worthIdle and waits for its ready event (every adapter has
// listed).
func (w *worthPart) startDev(ctx context.Context, name, manifests string) (*devSession, error) {
	logs := filepath.Join(w.dir, "dev-"+name)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	s := &devSession{events: filepath.Join(logs, "events.jsonl"), gone: make(chan struct{})}
	args := []string{"dev", "-f", manifests, "--kubeconfig", w.kubeconfig, "--no-status",
		"--cache-dir", filepath.Join(w.dir, "ko"), "--build-dir", w.root, "--log-dir", logs, "--events=json", "--events-file", s.events}
	if !w.ownIdle {
		args = append(args, "--idle", worthIdle.String())
	}
	s.cmd = exec.Command(w.opzero, args...)
	s.cmd.Dir = w.root
	// dev builds the ko:// images with `go build`: static, as ko and the
	// cluster's images are (and crbaseline, buildCmd), not linked to libc.
	s.cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := os.Create(filepath.Join(logs, "opzero-dev.out"))
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); out.Close(); close(s.gone) }()
	deadline := time.After(10 * time.Minute)
	for {
		for _, e := range readEvents(s.events) {
			if e.Event == dev.EventReady {
				return s, nil
			}
		}
		select {
		case <-s.gone:
			b, _ := os.ReadFile(out.Name())
			return nil, fmt.Errorf("opzero dev -f %s ended before ready:\n%s", manifests, tail(string(b), 2000))
		case <-deadline:
			s.stop()
			return nil, fmt.Errorf("opzero dev -f %s: not ready within 10 minutes (log %s)", manifests, out.Name())
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the session as Ctrl-C would, and waits for it.
func (s *devSession) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.gone:
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.gone
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// readEvents reads the session's event stream so far (a line being
// written is skipped).
func readEvents(path string) []dev.Event {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []dev.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e dev.Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event != "" {
			out = append(out, e)
		}
	}
	return out
}

// subscriptionsReady waits up to 2 minutes for n Subscriptions, every one
// Ready.
func (w *worthPart) subscriptionsReady(ctx context.Context, n int) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion("opzero.dev/v1alpha1")
		l.SetKind("SubscriptionList")
		if err := w.c.List(ctx, l); err != nil {
			return false, nil
		}
		ready := 0
		for i := range l.Items {
			if subscriptionReady(&l.Items[i]) {
				ready++
			}
		}
		return ready >= n, nil
	})
}

// subscriptionReady: the Subscription's Ready condition is True.
func subscriptionReady(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}
