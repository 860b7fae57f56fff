package activator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures an Activator.
type Options struct {
	// Command starts one instance with the cmd.Env it sets (nil: the
	// activator's own environment), to which the activator adds PORT.
	Command func() *exec.Cmd
	// AddressEnv, if set, names a variable the activator sets too: the
	// instance's own URL (http://127.0.0.1:PORT), where the other instances
	// reach it (an opzero operator forwards events there).
	AddressEnv string
	// Idle is how long an instance may serve nothing before it is stopped.
	Idle time.Duration
	// StartTimeout bounds a cold start (30 s).
	StartTimeout time.Duration
	// ReadinessPath, if set, is the path an instance is ready once a GET
	// of answers 200 (the container's readinessProbe.httpGet.path); else
	// it is ready once its port accepts a TCP connection, as Knative and
	// Kubernetes probe a container that declares no readinessProbe.
	ReadinessPath string
	// ColdStartDelay, if set, holds a cold start's first instance back
	// until this long after its exec even if it is ready sooner: a local
	// process starts in tens of milliseconds, a pod on a node in seconds
	// (sandbox, containers, Knative's probes), and this lets a local run
	// predict the cluster. Scale-ups are not delayed.
	ColdStartDelay time.Duration
	// Timeout bounds one request once it reaches an instance (Knative's
	// revision timeoutSeconds); past it the answer is 504. 0: no bound.
	Timeout time.Duration
	// MaxScale is the most instances that run at once; 0 means 1.
	MaxScale int
	// MinScale instances are kept running (started by Run, never stopped
	// for idleness); 0 scales to zero.
	MinScale int
	// Concurrency is the number of requests one instance takes before
	// another is started; 0 means unlimited (never scale past one for load).
	Concurrency int
	// OnEvent, if set, hears "cold-start" (0 -> 1 instance), "scale-up",
	// "ready" (with the time since that instance's exec), "scale-down" and
	// "scaled-to-zero" (for status lines). It is never called with the
	// activator's lock held, so it may call Instances.
	OnEvent func(what string, d time.Duration)
	// OnProcess, if set, hears each instance's life with its pid (for
	// machine-readable event streams); like OnEvent, never under the lock.
	OnProcess func(ProcessEvent)
}

// ProcessEvent is one step in the life of an instance.
type ProcessEvent struct {
	// What is ProcessStarted, ProcessReady, ProcessFailed (it never became
	// ready), ProcessStopped or ScaledToZero (no PID).
	What string
	PID  int
	// Cold is set on ProcessStarted when no instance ran (a cold start).
	Cold bool
	// Took is the time from exec to ready (ProcessReady).
	Took time.Duration
	// Reason of ProcessStopped: "idle" (scaled down), "shutdown" (the
	// activator stopped) or "exited" (on its own); the error of ProcessFailed.
	Reason   string
	ExitCode int // ProcessStopped
}

// What a ProcessEvent reports.
const (
	ProcessStarted = "started"
	ProcessReady   = "ready"
	ProcessFailed  = "failed"
	ProcessStopped = "stopped"
	ScaledToZero   = "scaled-to-zero"
)

// Activator is an http.Handler in front of scale-to-zero instances.
type Activator struct {
	opts Options

	mu     sync.Mutex
	insts  []*instance // oldest first
	closed bool        // Run has ended: no instance starts any more

	ColdStarts atomic.Int64 // starts from zero instances
	Starts     atomic.Int64 // every instance started
	Requests   atomic.Int64
}

// instance is one operator process.
type instance struct {
	cmd      *exec.Cmd
	proxy    *httputil.ReverseProxy
	ready    chan struct{} // closed once healthy or failed (err set first)
	err      error
	exited   chan struct{}
	inflight int
	last     time.Time
	stopping bool
	why      string // why it is stopping: "idle" or "shutdown"
	cold     bool   // started while no instance ran
}

func (i *instance) isReady() bool {
	select {
	case <-i.ready:
		return i.err == nil
	default:
		return false
	}
}

// New returns an Activator; Run must run for idle instances to stop.
func New(o Options) *Activator {
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.MaxScale <= 0 {
		o.MaxScale = 1
	}
	if o.MaxScale < o.MinScale {
		o.MaxScale = o.MinScale
	}
	if o.OnEvent == nil {
		o.OnEvent = func(string, time.Duration) {}
	}
	if o.OnProcess == nil {
		o.OnProcess = func(ProcessEvent) {}
	}
	return &Activator{opts: o}
}

// Instances is the number of instances running or starting.
func (a *Activator) Instances() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.insts)
}

// InFlight is the number of requests being served or waiting for a start.
func (a *Activator) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, i := range a.insts {
		n += i.inflight
	}
	return n
}

// PIDs of the running instances.
func (a *Activator) PIDs() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
	for _, i := range a.insts {
		out = append(out, i.cmd.Process.Pid)
	}
	return out
}

// Served says which instance took a request and what it waited for.
type Served struct {
	// PID is the instance's process: the one that answered, or the one
	// whose failed start the request waited for; 0 if none was started.
	PID int
	// Cold is set when the request waited for an instance started from
	// zero instances: it paid a cold start.
	Cold bool
}

// ServeHTTP proxies r to an instance, starting one first if needed.
func (a *Activator) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.Serve(w, r) }

// Serve is ServeHTTP that also reports which instance took the request.
func (a *Activator) Serve(w http.ResponseWriter, r *http.Request) Served {
	a.Requests.Add(1)
	inst, served, err := a.acquire(r.Context())
	if err != nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "activator: "+err.Error(), http.StatusServiceUnavailable)
		return served
	}
	defer a.release(inst)
	if a.opts.Timeout > 0 {
		ctx, cancel := context.WithTimeoutCause(r.Context(), a.opts.Timeout, errTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	inst.proxy.ServeHTTP(w, r)
	return served
}

// errShutDown answers a request that arrives once Run has ended: no
// instance is started that nothing would stop.
var errShutDown = errors.New("shutting down: no instance is started any more")

// errTimeout ends a request that outlived Options.Timeout.
var errTimeout = errors.New("activator: request timeout")

// proxyError answers a request the instance did not: 504 past the
// timeout, as Knative's queue-proxy does, else 502.
func (a *Activator) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(context.Cause(r.Context()), errTimeout) {
		http.Error(w, fmt.Sprintf("activator: no answer within the revision timeout of %s (the Service's timeoutSeconds)", a.opts.Timeout), http.StatusGatewayTimeout)
		return
	}
	http.Error(w, "activator: the instance did not answer: "+err.Error(), http.StatusBadGateway)
}

func (a *Activator) acquire(ctx context.Context) (*instance, Served, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, Served{}, errShutDown
	}
	inst := a.pickLocked()
	event := ""
	if inst == nil {
		var err error
		if inst, event, err = a.startLocked(); err != nil {
			a.mu.Unlock()
			return nil, Served{}, err
		}
	}
	inst.inflight++
	served := Served{PID: inst.cmd.Process.Pid, Cold: inst.cold && !inst.isReady()}
	a.mu.Unlock()
	if event != "" {
		a.opts.OnEvent(event, 0) // never under a.mu: a listener may call Instances
		a.opts.OnProcess(ProcessEvent{What: ProcessStarted, PID: inst.cmd.Process.Pid, Cold: event == "cold-start"})
	}
	select {
	case <-inst.ready:
	case <-ctx.Done():
		a.release(inst)
		return nil, served, ctx.Err()
	}
	if inst.err != nil {
		a.release(inst)
		return nil, served, inst.err
	}
	return inst, served, nil
}

// pickLocked chooses an instance for one more request, or nil when a new
// one should start.
func (a *Activator) pickLocked() *instance {
	var readyBest, startingBest, anyBest *instance
	for _, i := range a.insts {
		if i.stopping {
			continue
		}
		if anyBest == nil || i.inflight < anyBest.inflight {
			anyBest = i
		}
		if a.opts.Concurrency > 0 && i.inflight >= a.opts.Concurrency {
			continue
		}
		if i.isReady() {
			if readyBest == nil || i.inflight < readyBest.inflight {
				readyBest = i
			}
		} else if startingBest == nil || i.inflight < startingBest.inflight {
			startingBest = i
		}
	}
	switch {
	case readyBest != nil:
		return readyBest
	case startingBest != nil:
		return startingBest
	case a.live() < a.opts.MaxScale:
		return nil
	}
	return anyBest
}

func (a *Activator) live() int {
	n := 0
	for _, i := range a.insts {
		if !i.stopping {
			n++
		}
	}
	return n
}

func (a *Activator) release(inst *instance) {
	a.mu.Lock()
	inst.inflight--
	inst.last = time.Now()
	a.mu.Unlock()
}
