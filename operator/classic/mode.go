package classic

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/auth"
	"github.com/opzero/opzero/internal/engine/classic"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/internal/seam"
	"github.com/opzero/opzero/reconcileutil"
)

// Importing this package is what links classic mode: operator.New
// (operator/runtime.go) finds newManager in seam.Classic for --mode=classic.
func init() { seam.Classic = seam.NewManager[operator.Options](newManager) }

// managed is classic mode: a controller-runtime manager.
type managed struct {
	manager.Manager
	o operator.Options
}

func (m managed) Setup(op *builder.Controller, c client.Client) error {
	o := m.o
	co := classic.Options{MaxConcurrentReconciles: o.MaxConcurrentReconciles}
	if len(op.Events) > 0 {
		// The Broker's Triggers deliver with OIDC tokens, as to a serverless
		// operator: the same --audience, --allowed-senders, --insecure-no-auth.
		co.Events = classic.EventsOptions{Addr: o.EventsAddr, Ready: func(a net.Addr) {
			o.Logger.Info("classic operator taking Broker events", "addr", a.String(), "operator", op.Name)
		}}
		switch {
		case o.InsecureNoAuth:
			o.Logger.Info("WARNING: --insecure-no-auth: Broker events are accepted without authentication")
		case o.Audience == "" && o.EventsAddr != "0":
			return fmt.Errorf("operator %s takes Broker events (WatchesEvents) on --events-addr: set --audience to the Triggers' subscriber audience, or --insecure-no-auth, or --events-addr=0 to take none", op.Name)
		default:
			ao := auth.Options{Authenticator: auth.NewTokenReviewer(c, o.Audience, 0), Allowed: o.AllowedSenders, Log: o.Logger}
			co.Events.Wrap = func(h http.Handler) http.Handler { return auth.Middleware(ao, h) }
		}
	}
	return classic.Setup(m.Manager, op, co)
}

// GetEventRecorder is the manager's events.k8s.io recorder where its
// controller-runtime has one (v0.23 and later: a method whose result type
// older versions cannot name, so it is found by name); with an older one,
// opzero's, which writes each Event before returning (in serverless mode:
// before the event's answer).
func (m managed) GetEventRecorder(name string) reconcileutil.Recorder {
	if get := reflect.ValueOf(m.Manager).MethodByName("GetEventRecorder"); get.IsValid() && get.Type().NumIn() == 1 && get.Type().NumOut() == 1 {
		if r, ok := get.Call([]reflect.Value{reflect.ValueOf(name)})[0].Interface().(reconcileutil.Recorder); ok {
			return r
		}
	}
	return reconcileutil.NewEventRecorder(m.GetClient(), m.GetScheme(), name).WithLogger(m.o.Logger)
}

func newManager(cfg, clientCfg *rest.Config, o operator.Options) (seam.Manager, error) {
	// /healthz fails while an informer is stuck (its list or watch failing
	// for seam.InformerStuckAfter), so kubelet restarts the pod.
	informers := &classic.Informers{StuckAfter: seam.InformerStuckAfter}
	mo := managerOptions(o, clientCfg)
	mo.Cache.DefaultWatchErrorHandler = informers.WatchError
	mgr, err := manager.New(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("informers", informers.Check); err != nil {
		return nil, err
	}
	// The generated Deployment probes /readyz too: the manager serves it
	// only once a check is added (404 otherwise).
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return managed{Manager: mgr, o: o}, nil
}

func managerOptions(o operator.Options, clientCfg *rest.Config) manager.Options {
	ns := o.LeaderElectionNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		ns = "default"
	}
	metrics, probes := o.MetricsAddr, o.HealthProbeAddr
	if metrics == "" {
		metrics = "0"
	}
	if probes == "" {
		probes = "0"
	}
	return manager.Options{
		Scheme:                  o.Scheme,
		LeaderElection:          !o.DisableLeaderElection,
		LeaderElectionID:        "opzero-leader",
		LeaderElectionNamespace: ns,
		// The process exits when the manager stops: let the next one lead at once.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:        probes,
		Logger:                        o.Logger,
		// The client's calls are bounded (Options.APITimeout); the cache's
		// watches, made from the manager's own config, are not.
		NewClient: func(cfg *rest.Config, co client.Options) (client.Client, error) {
			c := rest.CopyConfig(cfg)
			if c.Timeout == 0 {
				c.Timeout = clientCfg.Timeout
			}
			return client.New(c, co)
		},
	}
}
