// Command gadgets is a controller-runtime project's main as kubebuilder
// writes it (flags, ENABLE_WEBHOOKS, +kubebuilder:webhook markers),
// adopted by opzero: its controller makes a ConfigMap per Gadget; its
// webhooks default the color, refuse a length over 100, and convert
// between gadgets.opzero.dev/v1 (spec.size) and v2 (spec.length, the hub).
// The tests of `opzero manifests` and `opzero dev` with webhooks run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/opzero/opzero/internal/manifests/testdata/gadgets/api/v1"
	v2 "github.com/opzero/opzero/internal/manifests/testdata/gadgets/api/v2"
	"github.com/opzero/opzero/internal/manifests/testdata/gadgets/controller"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

// +kubebuilder:webhook:path=/mutate-gadgets-opzero-dev-v2-gadget,mutating=true,failurePolicy=fail,sideEffects=None,groups=gadgets.opzero.dev,resources=gadgets,verbs=create;update,versions=v2,name=mgadget-v2.opzero.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-gadgets-opzero-dev-v2-gadget,mutating=false,failurePolicy=fail,sideEffects=None,groups=gadgets.opzero.dev,resources=gadgets,verbs=create;update,versions=v2,name=vgadget-v2.opzero.dev,admissionReviewVersions=v1

// gadgetWebhook is kubebuilder v4.7's webhook (controller-runtime v0.21's
// CustomDefaulter and CustomValidator, on runtime.Object): the form of the
// oldest controller-runtime opzero supports, which go.mod requires.
type gadgetWebhook struct{}

func gadget(obj runtime.Object) (*v2.Gadget, error) {
	g, ok := obj.(*v2.Gadget)
	if !ok {
		return nil, fmt.Errorf("expected a Gadget, got %T", obj)
	}
	return g, nil
}

func (gadgetWebhook) Default(_ context.Context, obj runtime.Object) error {
	g, err := gadget(obj)
	if err == nil && g.Spec.Color == "" {
		g.Spec.Color = "blue"
	}
	return err
}

func (gadgetWebhook) ValidateCreate(_ context.Context, obj runtime.Object) (admission.Warnings, error) {
	g, err := gadget(obj)
	if err == nil && g.Spec.Length > 100 {
		err = errors.New("length over 100 is not allowed")
	}
	return nil, err
}

func (w gadgetWebhook) ValidateUpdate(ctx context.Context, _, obj runtime.Object) (admission.Warnings, error) {
	return w.ValidateCreate(ctx, obj)
}

func (gadgetWebhook) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {
	return nil, nil
}

func main() {
	var metricsAddr, probeAddr, certPath string
	var enableLeaderElection bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Enable leader election for controller manager.")
	flag.StringVar(&certPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	var serverless operator.Options // --mode=serverless|classic|webhooks, --audience, ... (opzero)
	serverless.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))) // kubebuilder: zap
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	_ = v2.AddToScheme(scheme)
	mgr, err := classic.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		WebhookServer:          webhook.NewServer(webhook.Options{CertDir: certPath}),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "gadgets.opzero.dev",
	})
	if err == nil {
		err = (&controller.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	}
	if err == nil && os.Getenv("ENABLE_WEBHOOKS") != "false" {
		err = ctrl.NewWebhookManagedBy(mgr).For(&v2.Gadget{}).WithDefaulter(gadgetWebhook{}).WithValidator(gadgetWebhook{}).Complete()
	}
	if err == nil {
		err = mgr.AddHealthzCheck("healthz", healthz.Ping)
	}
	if err == nil {
		err = mgr.AddReadyzCheck("readyz", healthz.Ping)
	}
	if err == nil {
		err = mgr.Start(ctrl.SetupSignalHandler())
	}
	if err != nil {
		log.Error(err, "problem running manager")
		os.Exit(1)
	}
}
