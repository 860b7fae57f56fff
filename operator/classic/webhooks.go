package classic

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// webhooksOnly is --mode=webhooks: controller-runtime's own manager, built
// from the project's ctrl.Options, that serves the webhook server (with the
// project's certificate options), the health probes and the metrics, and
// runs no controller: the controllers SetupWithManager adds are dropped,
// since they run serverless elsewhere. Leader election is off: every
// replica answers the API server's webhook calls. The manager's cache
// starts an informer only for what a webhook reads through GetClient.
type webhooksOnly struct {
	manager.Manager
}

func newWebhooksOnly(cfg *rest.Config, mo manager.Options) (manager.Manager, error) {
	mo.LeaderElection = false
	m, err := manager.New(cfg, mo)
	if err != nil {
		return nil, err
	}
	return webhooksOnly{Manager: m}, nil
}

// Add drops controllers and adds every other Runnable (the webhook
// server's, certificate watchers, the project's own).
func (m webhooksOnly) Add(r manager.Runnable) error {
	if _, isCtrl := r.(controller.Controller); isCtrl {
		return nil
	}
	return m.Manager.Add(r)
}
