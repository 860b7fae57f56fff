//go:build !opzero_serverless

package operator

import (
	"fmt"
	"net"
	"net/http"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/auth"
	"github.com/opzero/opzero/internal/engine/classic"
)

// ClassicAvailable reports whether this binary can run classic mode: false
// when built with -tags opzero_serverless.
const ClassicAvailable = true

// managed is classic mode: a controller-runtime manager.
type managed struct{ manager.Manager }

func (m managed) setup(op *builder.Controller, o Options, c client.Client) error {
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

func newManager(cfg *rest.Config, o Options) (classicManager, error) {
	mgr, err := manager.New(cfg, managerOptions(o))
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	return managed{mgr}, nil
}

func managerOptions(o Options) manager.Options {
	ns := o.LeaderElectionNamespace
	if ns == "" {
		ns = envOr("POD_NAMESPACE", "default")
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
		Metrics:                 metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:  probes,
		Logger:                  o.Logger,
	}
}
