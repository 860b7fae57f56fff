package activator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/localport"
)

// An instance's life: started on demand, probed until ready, stopped
// (SIGTERM, so it drains) once idle, and forgotten when it exits.

// startLocked starts an instance and returns the event to report
// ("cold-start" or "scale-up") once a.mu is released.
func (a *Activator) startLocked() (*instance, string, error) {
	// The instance binds it after this returns: a port the kernel picked
	// for :0 could meanwhile be taken by any outgoing connection
	// (internal/localport).
	port, err := localport.Free()
	if err != nil {
		return nil, "", err
	}
	cmd := a.opts.Command()
	if cmd.Env == nil { // as exec.Cmd: nil inherits the activator's environment
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, fmt.Sprintf("PORT=%d", port))
	if a.opts.AddressEnv != "" {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=http://127.0.0.1:%d", a.opts.AddressEnv, port))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting the operator: %w", err)
	}
	a.Starts.Add(1)
	event := "scale-up"
	if a.live() == 0 {
		a.ColdStarts.Add(1)
		event = "cold-start"
	}
	u, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorHandler = a.proxyError
	inst := &instance{cmd: cmd, proxy: proxy, ready: make(chan struct{}), exited: make(chan struct{}), last: time.Now(), cold: event == "cold-start"}
	a.insts = append(a.insts, inst)
	go func() {
		_ = cmd.Wait()
		a.mu.Lock()
		why := inst.why
		a.mu.Unlock()
		if why == "" {
			why = "exited"
		}
		a.opts.OnProcess(ProcessEvent{What: ProcessStopped, PID: cmd.Process.Pid, Reason: why, ExitCode: cmd.ProcessState.ExitCode()})
		close(inst.exited)
		a.forget(inst)
	}()
	go func() {
		err := waitReady(u, a.opts.ReadinessPath, a.opts.StartTimeout, inst.exited)
		if rest := a.opts.ColdStartDelay - time.Since(t0); err == nil && inst.cold && rest > 0 {
			select {
			case <-time.After(rest):
			case <-inst.exited:
				err = errors.New("exited during the cold-start delay")
			}
		}
		if err != nil {
			inst.err = err
			a.forget(inst)
			_ = cmd.Process.Kill()
			a.opts.OnProcess(ProcessEvent{What: ProcessFailed, PID: cmd.Process.Pid, Reason: err.Error()})
		} else {
			a.opts.OnEvent("ready", time.Since(t0))
			a.opts.OnProcess(ProcessEvent{What: ProcessReady, PID: cmd.Process.Pid, Took: time.Since(t0)})
		}
		close(inst.ready)
	}()
	return inst, event, nil
}

// forget removes inst from the instances (it failed, exited or is stopping).
func (a *Activator) forget(inst *instance) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, i := range a.insts {
		if i == inst {
			a.insts = append(a.insts[:k], a.insts[k+1:]...)
			return
		}
	}
}

func waitReady(base *url.URL, path string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	ready := func() bool {
		if path == "" {
			conn, err := net.DialTimeout("tcp", base.Host, time.Second)
			if err == nil {
				conn.Close()
			}
			return err == nil
		}
		resp, err := c.Get(base.String() + path)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	for time.Now().Before(deadline) {
		if ready() {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the operator exited during its start (see its log)")
		case <-time.After(2 * time.Millisecond):
		}
	}
	return fmt.Errorf("the operator did not become ready within %s", timeout)
}

// Run stops instances idle for Options.Idle, until ctx ends; then it stops
// every instance and returns once they have exited.
func (a *Activator) Run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.stopAll()
			return
		case <-t.C:
		}
		a.mu.Lock()
		event := ""
		var started *instance
		if a.live() < a.opts.MinScale {
			started, event, _ = a.startLocked() // a failure is retried on the next tick
		}
		var idle *instance
		for _, i := range a.insts {
			if a.live() > a.opts.MinScale && !i.stopping && i.isReady() && i.inflight == 0 && time.Since(i.last) >= a.opts.Idle {
				idle = i
				break
			}
		}
		if idle != nil {
			idle.stopping, idle.why = true, "idle"
		}
		a.mu.Unlock()
		if event != "" {
			a.opts.OnEvent(event, 0)
			a.opts.OnProcess(ProcessEvent{What: ProcessStarted, PID: started.cmd.Process.Pid, Cold: event == "cold-start"})
		}
		if idle != nil {
			a.stop(idle)
			if a.Instances() == 0 {
				a.opts.OnEvent("scaled-to-zero", 0)
				a.opts.OnProcess(ProcessEvent{What: ScaledToZero})
			} else {
				a.opts.OnEvent("scale-down", 0)
			}
		}
	}
}

// stop sends SIGTERM (the operator drains) and waits for the exit; SIGKILL
// after 10 s.
func (a *Activator) stop(inst *instance) {
	_ = inst.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-inst.exited:
	case <-time.After(10 * time.Second):
		_ = inst.cmd.Process.Kill()
		<-inst.exited
	}
	a.forget(inst)
}

func (a *Activator) stopAll() {
	a.mu.Lock()
	a.closed = true
	insts := append([]*instance(nil), a.insts...)
	for _, i := range insts {
		i.stopping, i.why = true, "shutdown"
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, i := range insts {
		wg.Add(1)
		go func() { defer wg.Done(); a.stop(i) }()
	}
	wg.Wait()
}
