// Command bundles is the bundles test project's manager: a cobra command
// with pflag flags of its own (--leader-elect, --readiness-probe-port,
// --metrics-port, --trust-namespace, --webhook-port, --webhook-cert-dir),
// a manager cache restricted to the trust namespace's ConfigMaps and
// Secrets, a second cache it builds for its targets, and a validating
// webhook whose configuration is YAML in config/webhook.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"

	"github.com/opzero/opzero/examples/bundles/api/v1alpha1"
	"github.com/opzero/opzero/examples/bundles/controller"
)

type flags struct {
	leaderElect        bool
	leaderElectionNS   string
	readinessProbePort int
	metricsPort        int
	trustNamespace     string
	webhookPort        int
	webhookCertDir     string
}

func main() {
	var f flags
	var serverless operator.Options // --mode=serverless|classic, --audience, ... (opzero)
	cmd := &cobra.Command{
		Use:          "bundles",
		Short:        "Distributes a ConfigMap key of the trust namespace into every namespace",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), f, serverless)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Enable leader election.")
	fs.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "The namespace of the leader election Lease.")
	fs.IntVar(&f.readinessProbePort, "readiness-probe-port", 6060, "The port the readiness probe is served on.")
	fs.IntVar(&f.metricsPort, "metrics-port", 0, "The port metrics are served on (0: off).")
	fs.StringVar(&f.trustNamespace, "trust-namespace", "bundles-system", "The namespace of the Bundles' sources.")
	fs.IntVar(&f.webhookPort, "webhook-port", 6443, "The port the webhook server listens on.")
	fs.StringVar(&f.webhookCertDir, "webhook-cert-dir", "", "The directory of the webhook server's tls.crt and tls.key.")
	serverless.BindPFlags(fs)
	if err := cmd.ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags, serverless operator.Options) error {
	ctrl.SetLogger(zap.New())
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	cfg := ctrl.GetConfigOrDie()

	metricsAddr := "0"
	if f.metricsPort != 0 {
		metricsAddr = fmt.Sprintf(":%d", f.metricsPort)
	}
	trust := map[string]cache.Config{f.trustNamespace: {}}
	mgr, err := classic.NewManager(serverless, cfg, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "bundles.opzero.dev",
		LeaderElectionNamespace: f.leaderElectionNS,
		HealthProbeBindAddress:  fmt.Sprintf(":%d", f.readinessProbePort),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		WebhookServer:           webhook.NewServer(webhook.Options{Port: f.webhookPort, CertDir: f.webhookCertDir}),
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Namespaces: trust},
				&corev1.Secret{}:    {Namespaces: trust},
			},
		},
	})
	if err != nil {
		return err
	}
	// The targets' cache: every namespace, metadata only (the
	// controller watches PartialObjectMetadata through it).
	targets, err := cache.New(cfg, cache.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return err
	}
	if err := mgr.Add(targets); err != nil {
		return err
	}
	r := &controller.Reconciler{Client: mgr.GetClient(), TrustNamespace: f.trustNamespace, Targets: targets}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register("/validate-bundle", &webhook.Admission{Handler: validator{}})
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// validator refuses a Bundle that names no source ConfigMap or key.
type validator struct{}

func (validator) Handle(_ context.Context, req admission.Request) admission.Response {
	var b v1alpha1.Bundle
	if err := json.Unmarshal(req.Object.Raw, &b); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if b.Spec.Source.ConfigMap == "" || b.Spec.Source.Key == "" {
		return admission.Denied("a Bundle names its source ConfigMap and key")
	}
	return admission.Allowed("")
}
