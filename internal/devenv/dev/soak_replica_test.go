package dev_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
)

// hubReplica is the hub soak's second hub replica: opzero dev runs one
// process per Deployment, so the test runs the other itself, as dev runs
// the first (the same binary, arguments and environment, read from
// /proc), under another name in the bucket Leases and with no health
// address of its own.
type hubReplica struct {
	argv, env []string
	id        string
	logPath   string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// hubReplicaID is the second replica's name in the Leases; dev's is its
// pod name, <Deployment>-local.
const hubReplicaID = manifests.HubName + "-local-2"

func (s *soak) startHubReplica() *hubReplica {
	// A process dev has just started can show an empty cmdline and
	// environ for a moment: its parent returns from the fork once the
	// exec has replaced its memory, before the kernel has laid out the
	// new arguments. Read until both are there.
	var argv, env []string
	err := pollUntil(10*time.Second, func() bool {
		pid := s.p.DeploymentPID(manifests.HubNamespace, manifests.HubName)
		argv, env = proc.Argv(pid), nil
		for k, v := range proc.Env(pid) {
			env = append(env, k+"="+v)
		}
		return len(argv) > 0 && len(env) > 0
	})
	if err != nil {
		s.t.Fatalf("reading the hub's command line and environment from /proc: %v (last: argv %q, %d variables)", err, argv, len(env))
	}
	r := &hubReplica{argv: argv, env: env, id: hubReplicaID,
		logPath: s.p.LogPath("deployment-" + manifests.HubNamespace + "-" + manifests.HubName + "-2")}
	for i, a := range r.argv {
		if strings.HasPrefix(a, "--health-addr") {
			r.argv[i] = "--health-addr=" // dev's replica serves its health
		}
		if strings.HasPrefix(a, "--webhook-addr") {
			r.argv[i] = "--webhook-addr=" // and its admission endpoint, on a port dev chose
		}
	}
	for i, e := range r.env {
		if strings.HasPrefix(e, "POD_NAME=") {
			r.env[i] = "POD_NAME=" + r.id
		}
	}
	if err := r.start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { r.kill() })
	return r
}

func (r *hubReplica) start() error {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = r.env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting the second hub replica: %w", err)
	}
	go func() { _ = cmd.Wait(); logf.Close() }()
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	return nil
}

// kill SIGKILLs the replica and returns its pid.
func (r *hubReplica) kill() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0
	}
	pid := r.cmd.Process.Pid
	_ = r.cmd.Process.Kill()
	r.cmd = nil
	return pid
}

// bucketHolders counts the bucket Leases by holder ("" released; nil when
// they cannot be read).
func (s *soak) bucketHolders() map[string]int {
	var l coordinationv1.LeaseList
	if err := s.c.List(s.ctx, &l, client.InNamespace(manifests.HubNamespace), client.HasLabels{"opzero.dev/hub-bucket"}); err != nil || len(l.Items) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, le := range l.Items {
		h := ""
		if le.Spec.HolderIdentity != nil {
			h = *le.Spec.HolderIdentity
		}
		out[h]++
	}
	return out
}

// replicaFault is the fault hub-replica: the replica holding buckets goes.
// Dev's replica is stopped (SIGTERM, a rolling update's stop: it hands its
// buckets over at once, dev starts it again as a container restart); the
// test's is SIGKILLed (its buckets move once their Leases expire), and
// started again once dev's holds them. Either way what delivers the
// Subscription is down until every bucket is held again: a down interval
// for the Wakeups' check.
func (s *soak) replicaFault() string {
	h := s.bucketHolders()
	t0 := time.Now()
	var note string
	if h[hubReplicaID] == 0 {
		pid := s.p.DeploymentPID(manifests.HubNamespace, manifests.HubName)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		err := pollUntil(time.Minute, func() bool { h := s.bucketHolders(); return h != nil && h[""] == 0 && h[hubReplicaID] > 0 })
		note = fmt.Sprintf("SIGTERM of dev's hub replica pid %d (holding its buckets): replica 2 held them %s later (%v); holders now %v",
			pid, time.Since(t0).Round(time.Millisecond), err, s.bucketHolders())
	} else {
		held := h[hubReplicaID]
		pid := s.hub2.kill()
		err := pollUntil(time.Minute, func() bool { h := s.bucketHolders(); return h != nil && h[hubReplicaID] == 0 && h[""] == 0 })
		note = fmt.Sprintf("SIGKILL of hub replica 2 pid %d (holding %d buckets): dev's replica held them %s later (%v); replica 2 started again",
			pid, held, time.Since(t0).Round(time.Millisecond), err)
		if err := s.hub2.start(); err != nil {
			s.t.Fatal(err)
		}
	}
	s.mu.Lock()
	s.replicaDown = append(s.replicaDown, [2]time.Time{t0, time.Now()})
	s.mu.Unlock()
	return note
}

// hubLogs is hubLog over both replicas' logs.
func (s *soak) hubLogs() (relists, dropped int) {
	base := "deployment-" + manifests.HubNamespace + "-" + manifests.HubName
	for _, p := range []string{s.p.LogPath(base), s.p.LogPath(base + "-2")} {
		r, d := hubLog(p)
		relists, dropped = relists+r, dropped+d
	}
	return relists, dropped
}

// handoffLines are the lines of the replicas' logs about buckets won,
// lost and released.
func (s *soak) handoffLines() []string {
	base := "deployment-" + manifests.HubNamespace + "-" + manifests.HubName
	var out []string
	for i, p := range []string{s.p.LogPath(base), s.p.LogPath(base + "-2")} {
		b, _ := os.ReadFile(p)
		for _, l := range bytes.Split(b, []byte("\n")) {
			if bytes.Contains(l, []byte("buckets won")) || bytes.Contains(l, []byte("buckets lost")) || bytes.Contains(l, []byte("stopped: sends settled")) {
				out = append(out, "replica "+strconv.Itoa(i+1)+": "+string(l))
			}
		}
	}
	return out
}
