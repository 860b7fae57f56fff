//go:build !opzero_serverless

package operator

import (
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	// /healthz fails while an informer is stuck (its list or watch failing
	// for informerStuckAfter), so kubelet restarts the pod.
	informers := &classic.Informers{StuckAfter: informerStuckAfter}
	mo := managerOptions(o)
	mo.Cache.DefaultWatchErrorHandler = informers.WatchError
	mgr, err := manager.New(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("informers", informers.Check); err != nil {
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
		Metrics:                 metricsserver.Options{BindAddress: metrics},
		HealthProbeBindAddress:  probes,
		Logger:                  o.Logger,
		// The client's calls are bounded (Options.APITimeout); the cache's
		// watches, made from the manager's own config, are not.
		NewClient: func(cfg *rest.Config, co client.Options) (client.Client, error) {
			return client.New(o.withTimeout(cfg), co)
		},
	}
}
