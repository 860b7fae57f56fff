package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/auth"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/telemetry"
	"github.com/opzero/opzero/internal/trim"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/operator/internal/seam"
	"github.com/opzero/opzero/reconcileutil"
)

// Runtime runs registered operators in the configured mode.
type Runtime struct {
	opts   Options
	cfg    *rest.Config
	client client.Client // wrapped by recstate in both modes
	mgr    seam.Manager  // nil in serverless mode
	// mapper is the serverless client's RESTMapper, warmed once listening
	// (warm.go); nil in classic mode.
	mapper *gvMapper
	// events are the serverless recorders' Event writes (events.go); nil
	// in classic mode.
	events *eventWrites
	ops    []*builder.Controller
	// engines are the serverless engines, one per registered operator.
	engines []*serverless.Engine
	// describeTo is set from OPZERO_DESCRIBE: describe, do not serve (describe.go).
	describeTo string
	// routes, if set, wraps the serverless handler outside authentication
	// (an adopted manager's health checks, manager.go).
	routes func(http.Handler) http.Handler
	// authed, if set, wraps the serverless handler inside authentication
	// (an adopted manager's webhooks, manager.go).
	authed func(http.Handler) http.Handler
	// webhooks, describing an adopted project, are its webhooks (manager.go).
	webhooks *description.Webhooks
	// cache is an adopted project's cache options as the hub's filters,
	// for the description (seam.SetCache).
	cache *description.CacheScope
	// probes is an adopted project's health probe address, for the
	// description (seam.SetProbes).
	probes string
	// plan is set from OPZERO_PLAN: plan, do not serve (plan.go).
	plan *planMode
}

var _ builder.Runtime = (*Runtime)(nil)

// ErrClassicNotLinked is New's error for --mode=classic in a binary whose
// main does not import package operator/classic.
var ErrClassicNotLinked = errors.New(`--mode=classic: classic mode is not linked into this binary (serverless only, the default); ` +
	`add  import _ "github.com/opzero/opzero/operator/classic"  to package main and rebuild ` +
	`(it links controller-runtime's manager: 2-3 MiB more RSS per instance, in either mode)`)

// init is package operator's end of operator/internal/seam: it lets
// operator/classic (manager.go, adopted_events.go) reach a Runtime's
// engines, routes and description without exporting them. The other way,
// New finds classic mode in seam.Classic, which operator/classic/mode.go's
// init sets when the binary imports it.
func init() {
	seam.Engine = func(rt any, name string) http.Handler {
		for _, e := range rt.(*Runtime).engines {
			if e.Operator() == name {
				return e
			}
		}
		return nil
	}
	seam.SetRoutes = func(rt any, routes func(http.Handler) http.Handler) { rt.(*Runtime).routes = routes }
	seam.SetAuthenticatedRoutes = func(rt any, routes func(http.Handler) http.Handler) { rt.(*Runtime).authed = routes }
	seam.SetWebhooks = func(rt any, w *description.Webhooks) { rt.(*Runtime).webhooks = w }
	seam.SetCache = func(rt any, c *description.CacheScope) { rt.(*Runtime).cache = c }
	seam.SetProbes = func(rt any, addr string) { rt.(*Runtime).probes = addr }
}

// New connects to the API server and prepares the mode's machinery; nothing
// runs until Start.
func New(opts Options) (*Runtime, error) {
	if opts.Mode == "" {
		opts.Mode = Serverless
	}
	if opts.Scheme == nil {
		opts.Scheme = clientgoscheme.Scheme
	}
	if t := describeTarget(); t != "" {
		return newDescriber(opts, t), nil
	}
	if r, err := newPlanRuntime(opts); r != nil || err != nil {
		return r, err
	}
	opts.applyStandIns(opts.Logger) // a zero Logger discards
	// Classic mode not linked is bad input: said before anything is read.
	var newManager seam.NewManager[Options]
	if opts.Mode == Classic {
		var ok bool
		// set by operator/classic/mode.go's init (operator/internal/seam)
		if newManager, ok = seam.Classic.(seam.NewManager[Options]); !ok {
			return nil, ErrClassicNotLinked
		}
	}
	cfg := opts.Config
	if cfg == nil {
		var err error
		if cfg, err = config.GetConfig(); err != nil {
			return nil, fmt.Errorf("no Kubernetes API server: set KUBECONFIG (e.g. from `opzero controlplane up`) or run in a cluster: %w", err)
		}
	}
	r := &Runtime{opts: opts, cfg: cfg}
	switch opts.Mode {
	case Serverless:
		if opts.Audience == "" && !opts.InsecureNoAuth {
			return nil, errors.New("serverless mode authenticates senders: set --audience to the OIDC audience Knative's sources send " +
				"(their sink.audience), or pass --insecure-no-auth where nothing untrusted can reach the operator")
		}
		if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
			return nil, errors.New("--tls-cert-file and --tls-key-file go together")
		}
		rc := withTelemetry(opts.withTimeout(withRate(cfg)))
		hc, err := rest.HTTPClientFor(rc)
		if err != nil {
			return nil, err
		}
		mapper, err := newGVMapper(rc, hc) // discovers only the group-versions used (cold start)
		if err != nil {
			return nil, err
		}
		c, err := client.New(rc, client.Options{Scheme: opts.Scheme, HTTPClient: hc, Mapper: mapper})
		if err != nil {
			return nil, err
		}
		r.client, r.mapper = standin.NewClient(c), mapper
		r.events = &eventWrites{log: opts.Logger}
	case Classic:
		// The cache's watches use cfg as is; the client's calls are bounded
		// (Options.APITimeout).
		mc := withTelemetry(cfg)
		mgr, err := newManager(mc, opts.withTimeout(mc), r.opts)
		if err != nil {
			return nil, err
		}
		r.mgr, r.client = mgr, standin.NewClient(mgr.GetClient())
	case Webhooks:
		return nil, errors.New("--mode=webhooks serves an adopted controller-runtime project's webhooks (built with classic.NewManager); " +
			"an operator built with operator.New has none: run it serverless or classic")
	default:
		return nil, fmt.Errorf("unknown mode %q: want serverless or classic", opts.Mode)
	}
	return r, nil
}

func withRate(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	if c.QPS == 0 {
		c.QPS, c.Burst = 200, 400 // a serverless operator reads through, no cache
	}
	return c
}

// Mode is the mode the runtime runs in.
func (r *Runtime) Mode() Mode { return r.opts.Mode }

// GetScheme returns the scheme.
func (r *Runtime) GetScheme() *runtime.Scheme { return r.opts.Scheme }

// GetConfig returns the rest.Config.
func (r *Runtime) GetConfig() *rest.Config { return r.cfg }

// GetClient returns the client reconcilers should use: uncached in
// serverless mode, the manager's in classic mode.
func (r *Runtime) GetClient() client.Client { return r.client }

// GetEventRecorder returns an events.k8s.io recorder. Serverless writes
// each Event while the reconcile goes on, and answers its event only once
// the Events recorded before are written (events.go).
func (r *Runtime) GetEventRecorder(name string) reconcileutil.Recorder {
	if r.mgr != nil {
		return r.mgr.GetEventRecorder(name)
	}
	return reconcileutil.NewEventRecorder(r.eventClient(), r.opts.Scheme, name).WithLogger(r.opts.Logger)
}

// GetEventRecorderFor returns a core/v1 Event recorder (the older API),
// written as GetEventRecorder's.
func (r *Runtime) GetEventRecorderFor(name string) record.EventRecorder {
	if r.mgr != nil {
		return r.mgr.GetEventRecorderFor(name) //nolint:staticcheck // offered for reconcilers that use it
	}
	return reconcileutil.NewLegacyEventRecorder(r.eventClient(), r.opts.Scheme, name).WithLogger(r.opts.Logger)
}

// eventClient is the client the serverless recorders write Events with.
func (r *Runtime) eventClient() client.Client {
	if r.plan != nil {
		return r.plan.events // kept in the plan, never sent
	}
	if r.events == nil {
		return r.client
	}
	return r.events.client(r.client)
}

// Register adds an operator description (builder.Complete calls it).
func (r *Runtime) Register(op *builder.Controller) error {
	if r.describeTo != "" || r.plan != nil {
		r.ops = append(r.ops, op)
		return nil
	}
	if r.opts.Mode != Classic { // classic reads go through the manager's cache: not for one Get
		r.withForbiddenEvents(op)
	}
	switch r.opts.Mode {
	case Classic:
		if err := r.mgr.Setup(op, r.client); err != nil {
			return err
		}
	default:
		for _, e := range r.engines {
			if e.Operator() == op.Name {
				return fmt.Errorf("serverless: two operators named %s: name them apart (builder Named)", op.Name)
			}
		}
		so := serverless.Options{ReconcileTimeout: r.opts.ReconcileTimeout, MaxWait: r.opts.MaxWait,
			FollowUpSettle: r.opts.FollowUpSettle, MaxInFlight: r.opts.MaxInFlight, Logger: r.opts.Logger,
			AnswerAdmitted: r.opts.AnswerAdmitted, LeaseKeepIdle: r.opts.LeaseKeepIdle,
			EventCache: r.opts.EventCache}
		if r.opts.BackoffBase > 0 || r.opts.BackoffCap > 0 {
			p := backoff.Policy{Base: r.opts.BackoffBase, Cap: r.opts.BackoffCap}
			so.Backoff = &p
		}
		if r.opts.WakeupSink != "" {
			if err := v1alpha1.AddToScheme(r.opts.Scheme); err != nil {
				return err
			}
			p := backoff.DefaultPolicy()
			if so.Backoff != nil {
				p = *so.Backoff
			}
			so.Durable = wakeup.NewStore(r.client, wakeup.StoreOptions{Operator: op.Name, Target: op.Primary.GVK,
				Sink: r.opts.WakeupSink, Policy: p, Namespace: firstOf(r.opts.WakeupNamespace, os.Getenv("POD_NAMESPACE")),
				Shared: r.opts.manyInstances()})
		}
		if r.opts.manyInstances() {
			if err := coordinationv1.AddToScheme(r.opts.Scheme); err != nil {
				return err
			}
			l, err := lease.New(r.client, lease.Options{Operator: op.Name, Identity: r.opts.InstanceID,
				Duration: r.opts.LeaseDuration, Namespace: firstOf(r.opts.WakeupNamespace, os.Getenv("POD_NAMESPACE")),
				Address: r.advertiseAddress(), Sole: !r.opts.PerKeyLeases})
			if err != nil {
				return err
			}
			so.Locker = l
		}
		if r.opts.Async {
			if r.opts.WakeupSink == "" {
				return errors.New("--async needs --wakeup-sink: an accepted event is recorded as a Wakeup until it is reconciled")
			}
			so.Async = true
		}
		if r.opts.MaxConcurrentReconciles > 0 {
			so.MaxConcurrentReconciles = r.opts.MaxConcurrentReconciles
		}
		e, err := serverless.New(op, r.client, so)
		if err != nil {
			return err
		}
		r.engines = append(r.engines, e)
	}
	r.ops = append(r.ops, op)
	return nil
}

// Start runs until ctx ends, then shuts down gracefully.
func (r *Runtime) Start(ctx context.Context) error {
	if len(r.ops) == 0 {
		return errors.New("no operator registered: call builder.ControllerManagedBy(rt)...Complete(reconciler) before Start")
	}
	if r.describeTo != "" {
		return r.writeDescription()
	}
	if r.plan != nil {
		return r.runPlan(ctx)
	}
	stop, err := r.startTelemetry(ctx)
	if err != nil {
		return err
	}
	defer stop() // after the drain: what the last reconciles did is pushed too
	if r.mgr != nil {
		return r.mgr.Start(ctx)
	}
	so := serverless.ServeOptions{Addr: r.opts.Addr, ShutdownTimeout: r.opts.ShutdownTimeout,
		CertFile: r.opts.TLSCertFile, KeyFile: r.opts.TLSKeyFile,
		Ready: func(a net.Addr) {
			r.opts.Logger.Info("serverless operator listening", "addr", a.String(), "pid", os.Getpid(), "tls", r.opts.TLSCertFile != "")
			go r.announce(ctx) // the hub delivers to this pod before Knative finds it ready
			go r.warm(ctx)     // the first event's API connection and discovery, while Knative probes the pod
		}}
	if r.opts.InsecureNoAuth {
		r.opts.Logger.Info("WARNING: --insecure-no-auth: events are accepted without authentication; anyone who can reach this port can drive the operator")
	} else {
		ao := auth.Options{Authenticator: auth.NewTokenReviewer(r.client, r.opts.Audience, 0), Allowed: r.opts.AllowedSenders, Log: r.opts.Logger}
		so.Wrap = func(h http.Handler) http.Handler { return auth.Middleware(ao, h) }
	}
	if authn, inner, outer := so.Wrap, r.authed, r.routes; inner != nil || outer != nil {
		so.Wrap = func(h http.Handler) http.Handler {
			if inner != nil {
				h = inner(h)
			}
			if authn != nil {
				h = authn(h)
			}
			if outer != nil {
				h = outer(h)
			}
			return h
		}
	}
	// Once the first event is answered and the instance idle, give back
	// what start-up left resident (internal/trim). Outermost, the arrival
	// is stamped: a delivery's log line counts its authentication.
	// Innermost, an answer waits for the Event writes under way.
	if wrap := so.Wrap; wrap != nil {
		so.Wrap = func(h http.Handler) http.Handler { return arrived(trim.Handler(wrap(r.events.wrap(h)))) }
	} else {
		so.Wrap = func(h http.Handler) http.Handler { return arrived(trim.Handler(r.events.wrap(h))) }
	}
	defer r.events.flush() // what the drain's reconciles recorded
	if len(r.engines) == 1 {
		return r.engines[0].Serve(ctx, so)
	}
	g, err := serverless.NewGroup(r.engines...)
	if err != nil {
		return err
	}
	return g.Serve(ctx, so)
}

func arrived(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, telemetry.Arrived(r)) })
}

// advertiseAddress is Options.AdvertiseAddress, or its default.
func (r *Runtime) advertiseAddress() string {
	switch a := firstOf(r.opts.AdvertiseAddress, os.Getenv("OPZERO_ADVERTISE_ADDRESS")); {
	case a == "none":
		return ""
	case a != "":
		return a
	case r.opts.TLSCertFile != "":
		return "" // the pod IP is not in the certificate
	}
	return serverless.DefaultAdvertiseAddress(firstOf(r.opts.Addr, serverless.Addr()))
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
