// Package activator plays Knative Serving's part for one operator on a
// laptop: it holds the operator's URL while no process runs, starts the
// process on the first request (buffering requests meanwhile), proxies to
// it, and stops it (SIGTERM, so it drains) once it has been idle for the
// scale-to-zero period. It runs at most one instance (max-scale 1).
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
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configures an Activator.
type Options struct {
	// Command starts one instance; the activator sets PORT in its env.
	Command func() *exec.Cmd
	// Idle is how long an instance may serve nothing before it is stopped.
	Idle time.Duration
	// StartTimeout bounds a cold start (30 s).
	StartTimeout time.Duration
	// OnEvent, if set, hears "cold-start", "ready", "scaled-to-zero" with the
	// time since the cold start began (for status lines).
	OnEvent func(what string, d time.Duration)
}

// Activator is an http.Handler in front of a scale-to-zero instance.
type Activator struct {
	opts Options

	mu       sync.Mutex
	cmd      *exec.Cmd
	target   *httputil.ReverseProxy
	ready    chan struct{} // closed when the current instance is ready
	startErr error
	inflight int
	last     time.Time

	ColdStarts atomic.Int64
	Requests   atomic.Int64
}

// New returns an Activator; Run must run for idle instances to stop.
func New(o Options) *Activator {
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.OnEvent == nil {
		o.OnEvent = func(string, time.Duration) {}
	}
	return &Activator{opts: o}
}

// Instances is 1 while an instance runs, else 0.
func (a *Activator) Instances() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		return 1
	}
	return 0
}

// ServeHTTP proxies r to the instance, starting it first if none runs.
func (a *Activator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.Requests.Add(1)
	proxy, err := a.acquire(r.Context())
	if err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "activator: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer a.release()
	proxy.ServeHTTP(w, r)
}

func (a *Activator) acquire(ctx context.Context) (*httputil.ReverseProxy, error) {
	a.mu.Lock()
	if a.cmd == nil {
		if err := a.startLocked(); err != nil {
			a.mu.Unlock()
			return nil, err
		}
	}
	a.inflight++
	ready, proxy := a.ready, a.target
	a.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		a.release()
		return nil, ctx.Err()
	}
	a.mu.Lock()
	err := a.startErr
	a.mu.Unlock()
	if err != nil {
		a.release()
		return nil, err
	}
	return proxy, nil
}

func (a *Activator) release() {
	a.mu.Lock()
	a.inflight--
	a.last = time.Now()
	a.mu.Unlock()
}

func (a *Activator) startLocked() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := a.opts.Command()
	cmd.Env = append(append(os.Environ(), cmd.Env...), fmt.Sprintf("PORT=%d", port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the operator: %w", err)
	}
	a.ColdStarts.Add(1)
	a.opts.OnEvent("cold-start", 0)
	u, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	a.cmd, a.target, a.ready, a.startErr = cmd, httputil.NewSingleHostReverseProxy(u), make(chan struct{}), nil
	ready := a.ready
	go func() {
		err := waitHealthy(u.String()+"/healthz", a.opts.StartTimeout)
		a.mu.Lock()
		a.startErr = err
		a.mu.Unlock()
		if err == nil {
			a.opts.OnEvent("ready", time.Since(t0))
		}
		close(ready)
	}()
	return nil
}

func waitHealthy(u string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if resp, err := c.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("the operator did not become ready in time")
}

// Run stops an instance idle for Options.Idle, until ctx ends; then it stops
// any instance.
func (a *Activator) Run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.stop()
			return
		case <-t.C:
		}
		a.mu.Lock()
		idle := a.cmd != nil && a.inflight == 0 && time.Since(a.last) >= a.opts.Idle
		a.mu.Unlock()
		if idle {
			a.stop()
		}
	}
}

func (a *Activator) stop() {
	a.mu.Lock()
	cmd := a.cmd
	if cmd == nil || a.inflight > 0 {
		a.mu.Unlock()
		return
	}
	a.cmd = nil
	a.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	a.opts.OnEvent("scaled-to-zero", 0)
}
