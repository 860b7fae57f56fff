package dev

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/activator"
)

// Service is one Knative Service played locally.
type Service struct {
	Name, Namespace string
	URL             string // local, also written to status.url and status.address.url
	Spec            serviceSpec
	Activator       *activator.Activator

	Events     atomic.Int64 // requests answered
	Reconciles atomic.Int64 // keys the operator reported reconciled
	Failures   atomic.Int64 // non-2xx answers
	// FailedReconciles counts keys whose reconcile the answers report
	// failed: a 200 "reconcile failed, retry recorded" (durable time) as
	// well as a 500, 422 or 503 that says so. Retries the operator runs on
	// its own, between deliveries (without durable time), are not seen.
	FailedReconciles atomic.Int64

	mu         sync.Mutex
	deliveries []Delivery
	lastErr    Delivery // the last delivery with an error
	events     *EventWriter
	verbose    func(Delivery) // prints one line per delivery (opzero dev -v)
}

// Delivery is one request the Service answered.
type Delivery struct {
	At               time.Time
	Type, Kind, Name string // CloudEvent type and the kind/name extensions (of a wakeup: its target's)
	Source, Subject  string // CloudEvent source and subject
	Namespace        string // the namespace extension (of a wakeup: its target's)
	// Wake is why the operator was woken (WakeCreate, ...); WakeupReason
	// the Wakeup's reason (RequeueAfter, Retry, Accepted).
	Wake, WakeupReason string
	// Instance is the pid of the instance that took the request (0: none
	// was started); Cold is set when the request waited for a cold start.
	Instance int
	Cold     bool
	Code     int
	Result   string // the operator's Opzero-Result header
	// Reconciled and Failed count the keys the answer reports reconciled
	// and failed; Error is the failed keys' verdicts, or why the delivery
	// failed (the answer's body).
	Reconciled, Failed int
	Error              string
	Took               time.Duration
	// TraceID is the delivery's trace, if the operator reports it
	// (Opzero-Trace-Id, with telemetry on).
	TraceID string
}

// Key is the object a delivery names: namespace/name, else the subject.
func (d Delivery) Key() string {
	switch {
	case d.Name == "":
		return d.Subject
	case d.Namespace != "":
		return d.Namespace + "/" + d.Name
	}
	return d.Name
}

// LastError is the last delivery whose answer reported an error (a failed
// reconcile or a failed delivery); ok is false if there was none.
func (s *Service) LastError() (d Delivery, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr, s.lastErr.Error != ""
}

// Deliveries returns what the Service has answered so far (the last 10000).
func (s *Service) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := time.Now()
	rec := &recorder{ResponseWriter: w, code: 200}
	served := s.Activator.Serve(rec, r)
	s.Events.Add(1)
	h := r.Header
	d := Delivery{At: t, Type: h.Get("Ce-Type"), Kind: h.Get("Ce-Kind"), Name: h.Get("Ce-Name"), Namespace: h.Get("Ce-Namespace"),
		Source: h.Get("Ce-Source"), Subject: h.Get("Ce-Subject"), Wake: wakeReason(h), Instance: served.PID, Cold: served.Cold,
		Code: rec.code, Result: rec.Header().Get("Opzero-Result"), Took: time.Since(t)}
	if d.Wake == WakeWakeup && d.Name == "" {
		d.Kind, d.Namespace, d.Name, d.WakeupReason = h.Get("Ce-Targetkind"), h.Get("Ce-Targetnamespace"), h.Get("Ce-Targetname"), h.Get("Ce-Reason")
	}
	if wake, detail, ok := operatorsWake(rec.Header().Get(wakeReasonHeader)); ok && h.Get("Ce-Type") == "" {
		d.Wake = wake // a structured-mode event: the operator read what it was
		if wake == WakeWakeup {
			d.WakeupReason = detail
		} else if d.Kind == "" {
			d.Kind = detail
		}
	}
	d.TraceID = rec.Header().Get(traceHeader)
	a := readAnswer(rec.code, d.Result, rec.body.String())
	d.Reconciled, d.Failed, d.Error = a.reconciled, a.failed, a.err
	if rec.code < 200 || rec.code > 299 {
		s.Failures.Add(1)
	}
	s.Reconciles.Add(int64(a.reconciled))
	s.FailedReconciles.Add(int64(a.failed))
	s.emitDelivery(s.events, d)
	if s.verbose != nil {
		s.verbose(d)
	}
	s.mu.Lock()
	if s.deliveries = append(s.deliveries, d); len(s.deliveries) > 10000 {
		s.deliveries = s.deliveries[1:]
	}
	if d.Error != "" {
		s.lastErr = d
	}
	s.mu.Unlock()
}

// recorder keeps an answer's code, and the start of its body unless it is
// a 2xx (whose body stays empty: the reason is in Opzero-Result).
type recorder struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

// maxErrBody bounds the part of a non-2xx body kept as the error.
const maxErrBody = 4 << 10

func (r *recorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

func (r *recorder) Write(b []byte) (int, error) {
	if (r.code < 200 || r.code > 299) && r.body.Len() < maxErrBody {
		r.body.Write(b[:min(len(b), maxErrBody-r.body.Len())])
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// readBack returns the objects of one kind from the API server, in
// manifest order: opzero dev acts on what was applied, defaults included.
func (p *Platform) readBack(ctx context.Context, group, kind string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, u := range p.opts.Objects {
		if !isKind(u, group, kind) {
			continue
		}
		got, err := p.apply.get(ctx, u)
		if err != nil {
			return nil, err
		}
		out = append(out, got)
	}
	return out, nil
}

func (p *Platform) startServices(ctx context.Context, listeners []net.Listener) error {
	objs, err := p.readBack(ctx, "serving.knative.dev", "Service")
	if err != nil {
		return err
	}
	for i, u := range objs {
		spec, err := parseService(u)
		if err != nil {
			return err
		}
		if p.opts.Idle > 0 {
			spec.Idle = p.opts.Idle
		}
		s := &Service{Name: u.GetName(), Namespace: u.GetNamespace(), URL: "http://" + listeners[i].Addr().String(), Spec: *spec}
		s.events = p.opts.Events
		if p.opts.Verbose {
			name := s.Namespace + "/" + s.Name
			s.verbose = func(d Delivery) { p.say("%s", DeliveryLine(deliveryEvent(name, d))) }
		}
		kc, as, err := p.kubeconfigFor(ctx, u, "spec", "template", "spec")
		if err != nil {
			return err
		}
		if err := p.startActivator(s, kc); err != nil {
			return err
		}
		srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
		p.servers = append(p.servers, srv)
		go srv.Serve(listeners[i])
		status := serviceStatus(u, s.URL)
		if err := p.apply.patchStatus(ctx, u, status); err != nil {
			return err
		}
		p.madeReady(u, status, "url", "address")
		p.Services = append(p.Services, s)
		p.say("Knative Service %s: %s (%d to %d instances, %d requests each; idle period %s; runs as %s; log %s)",
			key(u), s.URL, spec.MinScale, spec.MaxScale, spec.Concurrency, spec.Idle, as, p.LogPath(s.logName()))
	}
	return nil
}

func (s *Service) logName() string { return "service-" + s.Namespace + "-" + s.Name }

func (p *Platform) startActivator(s *Service, kubeconfig string) error {
	exe := s.Spec.Command
	if exe == nil {
		var err error
		if exe, err = p.build.build(p.ctx, s.Spec.Pkg); err != nil {
			return err
		}
	}
	logf, err := p.logFile(s.logName())
	if err != nil {
		return err
	}
	args := make([]string, len(s.Spec.Args))
	for i, a := range s.Spec.Args {
		args[i] = rewrite(a, p.localURLs)
	}
	// PORT is added by the activator, per instance.
	env, err := p.containerEnv(p.ctx, "Knative Service "+s.Namespace+"/"+s.Name,
		pod{u: s.Spec.obj, namespace: s.Namespace, name: s.Name + "-00001-local"}, s.Spec.Container,
		append([]string{"KUBECONFIG=" + kubeconfig, "HTTP_PROXY=" + p.namesURL, "HTTPS_PROXY=" + p.namesURL, noProxy, "K_SERVICE=" + s.Name, "K_CONFIGURATION=" + s.Name, "K_REVISION=" + s.Name + "-00001"}, p.opts.Env...)...)
	if err != nil {
		return err
	}
	args = expandArgs(args, env)
	var cold atomic.Bool // a cold start waits for its instance
	s.Activator = activator.New(activator.Options{
		Idle: s.Spec.Idle, MinScale: s.Spec.MinScale, MaxScale: s.Spec.MaxScale, Concurrency: s.Spec.Concurrency, Timeout: s.Spec.Timeout,
		ReadinessPath:  s.Spec.ReadinessPath,
		ColdStartDelay: p.opts.ColdStartDelay,
		OnProcess:      s.onProcess(p.opts.Events),
		// each instance's own URL, recorded on the Leases it holds: the
		// other instances forward it the events of its keys
		AddressEnv: "OPZERO_ADVERTISE_ADDRESS",
		Command: func() *exec.Cmd {
			cmd := exec.Command(exe[0], slices.Concat(exe[1:], args)...)
			cmd.Env = env
			if s.Spec.Command != nil {
				cmd.Dir = p.build.buildDir
			}
			cmd.Stdout, cmd.Stderr = logf, logf
			return cmd
		},
		OnEvent: func(what string, d time.Duration) {
			name := s.Namespace + "/" + s.Name
			switch what {
			case "cold-start":
				cold.Store(true)
				p.say("%s: a request, 0 instances -> starting the operator (cold start #%d)", name, s.Activator.ColdStarts.Load())
			case "scale-up":
				p.say("%s: every instance busy -> starting instance %d", name, s.Activator.Instances())
			case "ready":
				note := ""
				if cold.Swap(false) {
					note = " (a local process start: a pod on a real node takes seconds more, see --cold-start-delay)"
					if p.opts.ColdStartDelay > 0 {
						note = fmt.Sprintf(" (held to --cold-start-delay %s, as a pod on a node)", p.opts.ColdStartDelay)
					}
				}
				p.say("%s: instance ready %s after exec%s; buffered requests proxied", name, d.Round(time.Millisecond), note)
			case "scale-down":
				p.say("%s: an instance idle for %s -> stopped; %d left", name, s.Spec.Idle, s.Activator.Instances())
			case "scaled-to-zero":
				p.say("%s: idle for %s -> scaled to zero (SIGTERM, drained); 0 instances", name, s.Spec.Idle)
			}
		},
	})
	p.wg.Add(1)
	go func() { defer p.wg.Done(); s.Activator.Run(p.ctx) }()
	return nil
}
