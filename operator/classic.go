//go:build !opzero_serverless

package operator

import (
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/engine/classic"
)

// ClassicAvailable reports whether this binary can run classic mode: false
// when built with -tags opzero_serverless.
const ClassicAvailable = true

// managed is classic mode: a controller-runtime manager.
type managed struct{ manager.Manager }

func (m managed) setup(op *builder.Controller, maxConcurrentReconciles int) error {
	return classic.Setup(m.Manager, op, classic.Options{MaxConcurrentReconciles: maxConcurrentReconciles})
}

func newManager(cfg *rest.Config, o Options) (classicManager, error) {
	mgr, err := manager.New(cfg, managerOptions(o))
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	// The generated Deployment probes /healthz on the probe port: the
	// manager serves it only once a check is added (404 otherwise, and the
	// process is killed as unhealthy).
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
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
		// The process exits when the manager stops: let the next one lead at once.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:        probes,
		Logger:                        o.Logger,
	}
}
