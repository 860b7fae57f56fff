package classic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/opzero/opzero/internal/adopt"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/internal/seam"
)

// NewManager is ctrl.NewManager for an existing controller-runtime project:
// main keeps its ctrl.Options and its SetupWithManager calls, and only
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{...})
//
// becomes
//
//	var serverless operator.Options
//	serverless.BindFlags(flag.CommandLine) // before flag.Parse: --mode, --audience, ...
//	mgr, err := classic.NewManager(serverless, cfg, ctrl.Options{...})
//
// Classic mode returns controller-runtime's own manager, built from mo as
// ctrl.NewManager would. Webhooks mode (--mode=webhooks) returns it too,
// without leader election and without the controllers: it serves the
// project's webhooks (and probes, metrics) always on, beside its
// controllers running serverless. Serverless mode returns a manager.Manager with no
// cache: the controllers added by ctrl.NewControllerManagedBy(mgr)...Complete
// keep their For, Owns, Watches (controller-runtime's handlers and the
// user's predicates), and run as opzero's serverless engine; reads go to
// the API server. In serverless mode:
//
//   - Add runs other Runnables alongside; Elected is closed at once.
//   - AddHealthzCheck and AddReadyzCheck are served on the serverless port:
//     /readyz, /readyz/<name> and /healthz/<name> run the checks (/healthz
//     itself is the engine's liveness answer).
//   - The metrics server is controller-runtime's, built from mo.Metrics, on
//     its own BindAddress (never the serverless port); "" or "0" turns it
//     off (there is no :8080 default: that is the serverless port).
//   - The health checks are also served on mo.HealthProbeBindAddress when
//     it is set (not "" or "0"), as controller-runtime serves them.
//   - Leader election (mo.LeaderElection, kubebuilder's --leader-elect) is
//     not needed: what it guarantees, one reconcile of a key at a time, opzero
//     gives per key (across instances with Leases when --max-scale > 1), so
//     instances that start and stop with the events never wait for a lease.
//     Start logs that it is not used.
//   - Every controller added runs in the one process, each as its own
//     engine behind one endpoint (serverless.Group): an event goes to the
//     controllers whose sources watch its kind.
//   - The webhooks registered on GetWebhookServer (admission, conversion)
//     are served on the serverless port at their paths, behind the same
//     authentication as the events: the API server calls the opzero hub,
//     which forwards each AdmissionReview with its OIDC token and so
//     wakes the operator (docs/webhooks.md). The project's webhook server
//     is not started (its port and certificate are not used).
//   - What cannot work fails at Start with the reason.
//   - Field indexes (GetFieldIndexer().IndexField) apply to the client's
//     List: it lists without the indexed requirement and keeps the objects
//     whose index function yields the wanted value.
func NewManager(o operator.Options, cfg *rest.Config, mo manager.Options) (manager.Manager, error) {
	if o.Mode == "" {
		o.Mode = operator.Serverless
	}
	describing := os.Getenv(description.Env) != ""
	// Planned (OPZERO_PLAN, `opzero plan`): whatever the mode, operator.New
	// makes a planning Runtime, never controller-runtime's manager.
	planning := os.Getenv(plan.Env) != "" || o.Mode == operator.Plan
	if o.Mode == operator.Classic && !describing && !planning {
		if mo.LeaderElection && mo.LeaderElectionNamespace == "" {
			// In a pod controller-runtime reads its namespace from the service
			// account; outside one (opzero dev runs Deployments as processes)
			// the generated manifests' $POD_NAMESPACE says it.
			mo.LeaderElectionNamespace = os.Getenv("POD_NAMESPACE")
		}
		if err := moveWebhookServer(&mo); err != nil { // opzero dev (webhooks.go)
			return nil, err
		}
		return manager.New(cfg, mo)
	}
	if o.Mode == operator.Webhooks && !describing && !planning {
		return newWebhooksOnly(cfg, mo)
	}
	if mo.Scheme != nil {
		o.Scheme = mo.Scheme
	}
	if o.Config == nil {
		o.Config = cfg
	}
	if mo.Logger.GetSink() == nil {
		mo.Logger = logf.Log
	}
	if o.Logger.GetSink() == nil {
		o.Logger = mo.Logger
	}
	rt, err := operator.New(o)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(o.Config)
	if err != nil {
		return nil, fmt.Errorf("an HTTP client for the API server: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(o.Config, hc)
	if err != nil {
		return nil, fmt.Errorf("a REST mapper for the API server: %w", err)
	}
	m := &adopted{opRuntime: opRuntime{rt}, describing: describing, cfg: o.Config, mo: mo, log: adopt.Logger(mo.Logger), http: hc, mapper: mapper,
		healthz: map[string]healthz.Checker{}, readyz: map[string]healthz.Checker{}, extra: map[string]http.Handler{}}
	if m.Manager, err = newerMethods(o.Config, mapper, mo); err != nil {
		return nil, err
	}
	m.cache = adopt.NewCache(nil, rt.GetScheme())
	m.client = m.cache.Indexed(rt.GetClient())
	m.cache.Reader = readerOrNil(m.client)
	ws := mo.WebhookServer
	if ws == nil {
		ws = webhook.NewServer(webhook.Options{})
	}
	m.webhooks = &webhooks{Server: ws}
	return m, nil
}

func readerOrNil(c client.Client) client.Reader {
	if c == nil {
		return nil
	}
	return c
}

// adopted is the serverless manager.Manager (and the describing one).
type adopted struct {
	opRuntime
	// Manager gives the methods of manager.Manager that adopted does not
	// declare: those controller-runtime added after the oldest version
	// opzero supports, whose types that version cannot name (see
	// newerMethods). nil when the linked controller-runtime has none.
	manager.Manager
	// describing: OPZERO_DESCRIBE is set (the Runtime describes, not serves).
	describing bool
	cfg        *rest.Config
	mo         manager.Options
	log        logr.Logger
	http       *http.Client
	mapper     meta.RESTMapper
	cache      *adopt.Cache
	client     client.Client // the runtime's, with field indexes applied to List

	mu          sync.Mutex
	controllers []*adopt.Controller
	// current is the cache of the controller added last: the one whose
	// builder asks for caches now (each controller has its own shims).
	current   *adopt.Cache
	runnables []manager.Runnable
	errs      []error
	healthz   map[string]healthz.Checker
	readyz    map[string]healthz.Checker
	extra     map[string]http.Handler
	// pending: requests made before their engine existed (see later).
	pending []pendingRequest
	// mapperAsked: GetRESTMapper was the last call before GetCache (see GetCache).
	mapperAsked bool
	webhooks    *webhooks

	// stash carries one watched event's requests from the filter to the
	// map function, keyed by the event's object (see filter).
	stash sync.Map
}

var _ manager.Manager = (*adopted)(nil)

type pendingRequest struct {
	controller string
	req        reconcile.Request
}

func (m *adopted) Add(r manager.Runnable) error {
	var name string // the controller's, once adopted
	fork := m.cache.Fork()
	a, isCtrl, err := adopt.Adopt(r, fork, func(req reconcile.Request, after time.Duration) {
		m.mu.Lock()
		n := name
		m.mu.Unlock()
		m.later(n, req, after)
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err != nil:
		m.errs = append(m.errs, err)
	case isCtrl:
		name = a.Name()
		m.controllers = append(m.controllers, a)
		m.current = fork
		m.mapperAsked = false
	default:
		m.runnables = append(m.runnables, r)
	}
	return nil
}

func (m *adopted) Elected() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (m *adopted) AddMetricsServerExtraHandler(path string, h http.Handler) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.extra[path]; dup {
		return fmt.Errorf("metrics server: a handler for %s is already added", path)
	}
	m.extra[path] = h
	return nil
}

func (m *adopted) AddHealthzCheck(name string, c healthz.Checker) error {
	return m.check(m.healthz, name, c)
}
func (m *adopted) AddReadyzCheck(name string, c healthz.Checker) error {
	return m.check(m.readyz, name, c)
}

func (m *adopted) check(to map[string]healthz.Checker, name string, c healthz.Checker) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := to[name]; dup {
		return fmt.Errorf("check %q is already added", name)
	}
	to[name] = c
	return nil
}

func (m *adopted) GetWebhookServer() webhook.Server        { return m.webhooks }
func (m *adopted) GetLogger() logr.Logger                  { return m.log }
func (m *adopted) GetControllerOptions() config.Controller { return m.mo.Controller }
func (m *adopted) GetHTTPClient() *http.Client             { return m.http }
func (m *adopted) GetFieldIndexer() client.FieldIndexer    { return m.cache }
func (m *adopted) GetAPIReader() client.Reader {
	if r := readerOrNil(m.Runtime.GetClient()); r != nil || !m.describing {
		return r
	}
	return describingClient{scheme: m.GetScheme(), mapper: m.mapper}
}

// GetClient is the runtime's client (uncached), with field indexes applied to List.
func (m *adopted) GetClient() client.Client {
	if m.client == nil && m.describing {
		return describingClient{scheme: m.GetScheme(), mapper: m.mapper}
	}
	return m.client
}
func (m *adopted) GetConfig() *rest.Config { return m.cfg }

// GetCache returns the informer shims. The builder's Owns asks for the REST
// mapper (for its EnqueueRequestForOwner) and then, at once, for the cache
// of that source: that cache marks its kind owned, which is described so
// that its source delivers whole objects with an owner of the For kind
// (Resource mode, owner filter). A user's own Watches(...,
// EnqueueRequestForOwner(...)) builds its handler before Complete adds the
// controller, so its kind stays watched (the handler still maps it).
func (m *adopted) GetCache() cache.Cache {
	m.mu.Lock()
	defer m.mu.Unlock()
	owned := m.mapperAsked
	m.mapperAsked = false
	switch {
	case m.current == nil:
		return m.cache
	case owned:
		return m.current.OwnedView()
	}
	return m.current
}

func (m *adopted) GetRESTMapper() meta.RESTMapper {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mapperAsked = true
	return m.mapper
}

// refusals lists what was asked of the manager that cannot work serverless.
func (m *adopted) refusals() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	errs := append([]error(nil), m.errs...)
	if len(m.controllers) == 0 {
		errs = append(errs, errors.New("no controller was added: call ctrl.NewControllerManagedBy(mgr)...Complete(r) before Start"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("serverless mode: %w", err)
	}
	return nil
}

// Start starts the adopted controller's sources, registers it with the
// serverless engine and serves until ctx ends (or, describing, writes the
// description and returns).
func (m *adopted) Start(ctx context.Context) error {
	if m.describing && m.Mode() == operator.Classic {
		// Described for a classic Deployment: controller-runtime's manager
		// will run it, so nothing is refused and every controller is described.
		if len(m.controllers) == 0 {
			return errors.New("no controller was added: call ctrl.NewControllerManagedBy(mgr)...Complete(r) before Start")
		}
	} else if err := m.refusals(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stops []<-chan error
	defer func() {
		cancel()
		for _, s := range stops {
			<-s
		}
	}()
	for _, a := range m.controllers { // each its own engine, on one endpoint
		foreign := a.ForeignSources(m.Runtime.GetScheme()) // watched through a cache the project built; Start moves them
		stopped, err := a.Start(ctx)
		if err != nil {
			return err
		}
		stops = append(stops, stopped)
		op, err := m.controller(a, foreign)
		if err != nil {
			return err
		}
		m.mu.Lock() // later reads the engine Register sets
		err = m.Register(op)
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if m.describing {
		m.mu.Lock()
		seam.SetWebhooks(m.Runtime, m.describeWebhooks())
		seam.SetCache(m.Runtime, cacheScope(m.mo.Cache, m.Runtime.GetScheme()))
		seam.SetProbes(m.Runtime, cmp.Or(m.mo.HealthProbeBindAddress, "0")) // "0": an adopted project that serves none
		m.mu.Unlock()
		return m.Runtime.Start(ctx)
	}
	m.mu.Lock()
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, p := range pending {
		m.later(p.controller, p.req, 0)
	}
	// seam's setters are set by package operator's init (operator/runtime.go)
	seam.SetRoutes(m.Runtime, m.serveChecks)
	if p := m.webhooks.paths(); len(p) > 0 {
		seam.SetAuthenticatedRoutes(m.Runtime, m.webhooks.serve)
		m.log.Info("serving the webhooks on the serverless port, behind authentication (the opzero hub forwards the API server's calls)", "paths", strings.Join(p, ", "))
	}
	errc := make(chan error, len(m.runnables)+1)
	var wg sync.WaitGroup
	run := func(what string, r manager.Runnable) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Start(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", what, err)
				cancel()
			}
		}()
	}
	for _, r := range m.runnables {
		run(fmt.Sprintf("runnable %T", r), r)
	}
	if m.mo.LeaderElection {
		m.log.Info("leader election is not used serverless: opzero serializes each key instead (across instances with Leases when --max-scale > 1)")
	}
	if err := m.serveProbesAndMetrics(run); err != nil {
		return err
	}
	serveErr := m.Runtime.Start(ctx)
	cancel()
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return serveErr
	}
}

// serveProbesAndMetrics runs the project's health probe and metrics
// servers, if it asked for them, unless the Runtime plans (OPZERO_PLAN):
// a plan writes itself and returns, and binds no port.
func (m *adopted) serveProbesAndMetrics(run func(string, manager.Runnable)) error {
	if m.Mode() == operator.Plan {
		return nil
	}
	if ps, err := m.probeServer(); err != nil {
		return err
	} else if ps != nil {
		run("health probe server", ps)
	}
	if ms, err := m.metricsServer(); err != nil {
		return err
	} else if ms != nil {
		run("metrics server", ms)
	}
	return nil
}
