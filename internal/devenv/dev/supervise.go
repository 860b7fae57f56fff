package dev

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Kubelet restarts a container whose process exits or whose liveness probe
// fails; opzero dev does the same for the processes it runs for sources:
// Knative's adapters and the ko:// Deployments (the wakeup source).
const (
	probePeriod       = 2 * time.Second // kubelet's default is 10 s; locally faster
	probeTimeout      = time.Second     // kubelet's default
	failureThreshold  = 3               // kubelet's default
	restartBackoff    = time.Second     // doubling to maxRestartBackoff, as kubelet's CrashLoopBackOff
	maxRestartBackoff = 30 * time.Second
)

// running is one process a supervisor watches.
type running interface {
	Done() <-chan struct{}
	PID() int
	Stop()
}

// probed is a running process with a liveness probe.
type probed interface {
	Probe(ctx context.Context, timeout time.Duration) error
}

// gapped is a running process that can tell its watch stream had a gap.
type gapped interface {
	Gap() <-chan string
	Synced() <-chan struct{}
}

// supervised keeps one process running: restarted when it exits, when its
// probe fails failureThreshold times in a row, or when it reports a gap in
// its watch.
type supervised struct {
	what  string // "ApiServerSource ns/name", "Deployment ns/name"
	start func(ctx context.Context) (running, error)
	// restarted, if set, runs after a restart once the new process has
	// synced (the platform asks for a sweep: what fell in the gap).
	restarted func(ctx context.Context, why string)
	// gone, if set, says on each probe tick whether the object the process
	// stands for was deleted: its process is then stopped for good, as a
	// kubelet stops a deleted pod's.
	gone func(ctx context.Context) bool
	// ready, if set, is told on each probe tick that the process runs (and
	// its probe, if it has one, answered), and before a restart that it
	// does not: a Deployment's pods are marked as a kubelet would
	// (podsReady).
	ready func(ctx context.Context, ready bool)

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	cur running

	started time.Time     // of cur
	delay   time.Duration // before the next restart: CrashLoopBackOff
}

// supervise starts watching s.cur (already started) until Stop.
func (p *Platform) supervise(s *supervised) {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.started = time.Now()
	s.done = make(chan struct{})
	go func() { defer close(s.done); p.watch(s) }()
}

func (s *supervised) current() running {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// stop ends the supervision, then the process.
func (s *supervised) stop() {
	s.cancel()
	<-s.done
	if r := s.current(); r != nil {
		r.Stop()
	}
}

// watch is the supervisor's loop.
func (p *Platform) watch(s *supervised) {
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	fails := 0
	for {
		r := s.current()
		var gap <-chan string
		if g, ok := r.(gapped); ok {
			gap = g.Gap()
		}
		var why string
		select {
		case <-s.ctx.Done():
			return
		case <-r.Done():
			why = "it exited" + exitNote(r)
		case line := <-gap:
			why = "its watch had a gap, so events were lost (its log: " + line + ")"
		case <-tick.C:
			if s.gone != nil && s.gone(s.ctx) {
				pid := r.PID() // 0: deleted while it waited for its volumes (mountwait.go)
				r.Stop()
				if pid == 0 {
					p.say("%s: deleted before it started", s.what)
					return
				}
				p.say("%s: deleted: pid %d stopped", s.what, pid)
				p.opts.Events.Write(Event{Event: EventProcessStopped, Process: s.what, PID: pid, Reason: "Deployment deleted"})
				return
			}
			if w, ok := r.(interface{ Waiting() bool }); ok && w.Waiting() {
				continue // not started (mountwait.go): its pods stay not Ready
			}
			pr, ok := r.(probed)
			if !ok {
				s.tellReady(true)
				continue
			}
			err := pr.Probe(s.ctx, probeTimeout)
			if err == nil {
				fails = 0
				s.tellReady(true)
				continue
			}
			if fails++; fails < failureThreshold {
				continue
			}
			why = fmt.Sprintf("its liveness probe failed %d times in a row (%v)", fails, err)
		}
		fails = 0
		p.restart(s, r, why)
	}
}

func (s *supervised) tellReady(ready bool) {
	if s.ready != nil {
		s.ready(s.ctx, ready)
	}
}

// exitNote says how a process ended, if it can tell.
func exitNote(r running) string {
	if e, ok := r.(interface{ ExitErr() error }); ok && e.ExitErr() != nil {
		return " (" + e.ExitErr().Error() + ")"
	}
	return ""
}

// restart stops old and starts a new process, retrying with a growing
// backoff while the start fails (the API server may be away).
func (p *Platform) restart(s *supervised, old running, why string) {
	old.Stop()
	s.tellReady(false)
	// A process that ran less than a minute is restarted after a delay
	// that doubles each time, as kubelet's CrashLoopBackOff (10 s to 5 min
	// there; shorter locally); one that ran longer, at once.
	if ran := time.Since(s.started); ran < time.Minute {
		s.delay = min(max(2*s.delay, restartBackoff), maxRestartBackoff)
		p.say("%s: pid %d stopped after running %s because %s; restarting in %s", s.what, old.PID(), ran.Round(time.Millisecond), why, s.delay)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.delay):
		}
	} else {
		s.delay = 0
	}
	wait := restartBackoff
	for attempt := 1; ; attempt++ {
		t := time.Now()
		r, err := s.start(s.ctx)
		if s.ctx.Err() != nil {
			if r != nil {
				r.Stop()
			}
			return
		}
		if err == nil {
			s.mu.Lock()
			s.cur, s.started = r, time.Now()
			s.mu.Unlock()
			p.say("%s: restarted pid %d as pid %d in %s because %s", s.what, old.PID(), r.PID(), since(t), why)
			p.opts.Events.Write(Event{Event: EventProcessRestarted, Process: s.what, PID: r.PID(), Reason: why})
			if g, ok := r.(gapped); ok && s.restarted != nil {
				select {
				case <-g.Synced():
					s.restarted(s.ctx, why)
				case <-r.Done():
				case <-s.ctx.Done():
				case <-time.After(time.Minute):
					p.say("%s: pid %d has not listed its objects after a minute", s.what, r.PID())
				}
			}
			return
		}
		p.say("%s: restart %d failed (%v); next try in %s", s.what, attempt, err, wait)
		p.opts.Events.Write(Event{Event: EventError, Process: s.what, Message: fmt.Sprintf("restart %d failed: %v", attempt, err)})
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRestartBackoff)
	}
}

// proc is a running ko:// Deployment process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
	// probe is the container's livenessProbe, played on the local port.
	probe func(ctx context.Context, timeout time.Duration) error
}

// startProc starts cmd and reaps it.
func startProc(cmd *exec.Cmd) (*proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pr := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { pr.err = cmd.Wait(); close(pr.done) }()
	return pr, nil
}

func (pr *proc) Done() <-chan struct{} { return pr.done }
func (pr *proc) PID() int              { return pr.cmd.Process.Pid }

func (pr *proc) ExitErr() error {
	select {
	case <-pr.done:
		return pr.err
	default:
		return nil
	}
}

func (pr *proc) Probe(ctx context.Context, timeout time.Duration) error {
	if pr.probe == nil {
		return nil
	}
	return pr.probe(ctx, timeout)
}

// Stop sends SIGTERM and waits, SIGKILL after 10 s.
func (pr *proc) Stop() {
	pr.once.Do(func() {
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
	})
}

// SourcePIDs maps each supervised process ("ApiServerSource ns/name",
// "mtping", "Deployment ns/name") to its current pid.
func (p *Platform) SourcePIDs() map[string]int {
	out := map[string]int{}
	for _, s := range append(p.adapterList(), p.procs...) {
		out[s.what] = s.current().PID()
	}
	return out
}
