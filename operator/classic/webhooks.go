package classic

import (
	"fmt"
	"os"
	"strconv"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// The environment with which a platform that runs the webhooks process
// itself (opzero dev, several processes on one host) moves its webhook
// server (--mode=webhooks and classic), as Knative gives a Service's
// container PORT: the port, and the folder of tls.crt and tls.key. Unset,
// the project's own options apply.
const (
	envWebhookPort    = "OPZERO_WEBHOOK_PORT"
	envWebhookCertDir = "OPZERO_WEBHOOK_CERT_DIR"
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
	if err := moveWebhookServer(&mo); err != nil {
		return nil, err
	}
	m, err := manager.New(cfg, mo)
	if err != nil {
		return nil, err
	}
	return webhooksOnly{Manager: m}, nil
}

// moveWebhookServer applies envWebhookPort and envWebhookCertDir to the
// project's webhook server (controller-runtime's DefaultServer; a server of
// the project's own type cannot be moved: an error says so).
func moveWebhookServer(mo *manager.Options) error {
	port, dir := os.Getenv(envWebhookPort), os.Getenv(envWebhookCertDir)
	if port == "" && dir == "" {
		return nil
	}
	if mo.WebhookServer == nil {
		mo.WebhookServer = webhook.NewServer(webhook.Options{})
	}
	ds, ok := mo.WebhookServer.(*webhook.DefaultServer)
	if !ok {
		return fmt.Errorf("%s, %s: the webhook server is a %T, not controller-runtime's webhook.NewServer: its port and certificate folder cannot be moved", envWebhookPort, envWebhookCertDir, mo.WebhookServer)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("%s=%q: want a port number", envWebhookPort, port)
		}
		ds.Options.Port = n
	}
	if dir != "" {
		ds.Options.CertDir = dir
	}
	return nil
}

// Add drops controllers and adds every other Runnable (the webhook
// server's, certificate watchers, the project's own).
func (m webhooksOnly) Add(r manager.Runnable) error {
	if _, isCtrl := r.(controller.Controller); isCtrl {
		return nil
	}
	return m.Manager.Add(r)
}
