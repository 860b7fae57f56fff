// Command widgets is a controller-runtime project's main as kubebuilder
// writes it, with a defaulting and a validating webhook and no
// conversion, adopted by opzero: its controller makes a ConfigMap per
// Widget; its webhooks default the color to green and refuse a size over
// 100. The tests of webhooks at zero (served through the hub) run it.
//
// For those tests: WIDGETS_WEBHOOK_HANG=1 makes every webhook call hang
// until the caller gives up; WIDGETS_OLD_VERSION=1 also registers
// widgets.opzero.dev/v1alpha1, another schema with no conversion (bad
// input); WIDGETS_NO_WEBHOOKS=1 registers no webhook although the
// markers declare them (bad input); WIDGETS_CACHE_SCOPE=1 restricts its
// manager's cache (two namespaces, its ConfigMaps by label, Secrets by a
// field selector the hub cannot apply).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/opzero/opzero/internal/manifests/testdata/widgets/api/v1"
	"github.com/opzero/opzero/internal/manifests/testdata/widgets/api/v1alpha1"
	"github.com/opzero/opzero/internal/manifests/testdata/widgets/controller"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

// +kubebuilder:webhook:path=/mutate-widgets-opzero-dev-v1-widget,mutating=true,failurePolicy=fail,sideEffects=None,groups=widgets.opzero.dev,resources=widgets,verbs=create;update,versions=v1,name=mwidget-v1.opzero.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-widgets-opzero-dev-v1-widget,mutating=false,failurePolicy=fail,sideEffects=None,groups=widgets.opzero.dev,resources=widgets,verbs=create;update,versions=v1,name=vwidget-v1.opzero.dev,admissionReviewVersions=v1

// widgetWebhook is controller-runtime v0.21's CustomDefaulter and
// CustomValidator.
type widgetWebhook struct{ hang bool }

func (w widgetWebhook) widget(ctx context.Context, obj runtime.Object) (*v1.Widget, error) {
	if w.hang {
		<-ctx.Done() // the test of one operator's webhook hanging
		return nil, ctx.Err()
	}
	x, ok := obj.(*v1.Widget)
	if !ok {
		return nil, fmt.Errorf("expected a Widget, got %T", obj)
	}
	return x, nil
}

func (w widgetWebhook) Default(ctx context.Context, obj runtime.Object) error {
	x, err := w.widget(ctx, obj)
	if err == nil && x.Spec.Color == "" {
		x.Spec.Color = "green"
	}
	return err
}

func (w widgetWebhook) ValidateCreate(ctx context.Context, obj runtime.Object) (admission.Warnings, error) {
	x, err := w.widget(ctx, obj)
	if err == nil && x.Spec.Size > 100 {
		err = errors.New("size over 100 is not allowed")
	}
	return nil, err
}

func (w widgetWebhook) ValidateUpdate(ctx context.Context, _, obj runtime.Object) (admission.Warnings, error) {
	return w.ValidateCreate(ctx, obj)
}

func (widgetWebhook) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {
	return nil, nil
}

func main() {
	var metricsAddr, probeAddr, certPath string
	var enableLeaderElection bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	var readinessPort *int
	if os.Getenv("WIDGETS_READINESS_PORT") == "1" { // as some projects name it (a test)
		readinessPort = flag.Int("readiness-probe-port", 9440, "The port the probe endpoint binds to.")
	} else {
		flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	}
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Enable leader election for controller manager.")
	flag.StringVar(&certPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	var serverless operator.Options // --mode=serverless|classic|webhooks, --audience, ... (opzero)
	serverless.BindFlags(flag.CommandLine)
	flag.Parse()
	if readinessPort != nil {
		probeAddr = fmt.Sprintf(":%d", *readinessPort)
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))) // kubebuilder: zap
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	if os.Getenv("WIDGETS_OLD_VERSION") == "1" {
		_ = v1alpha1.AddToScheme(scheme)
	}
	var scope cache.Options
	if os.Getenv("WIDGETS_CACHE_SCOPE") == "1" {
		scope = cache.Options{
			DefaultNamespaces: map[string]cache.Config{"team-a": {}, "team-b": {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "widgets"})},
				&corev1.Secret{}:    {Field: fields.OneTermEqualSelector("metadata.name", "widgets-token")},
			},
		}
	}
	mgr, err := classic.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{
		Cache:                  scope,
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		WebhookServer:          webhook.NewServer(webhook.Options{CertDir: certPath}),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "widgets.opzero.dev",
	})
	if err == nil {
		err = (&controller.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
	}
	if err == nil && os.Getenv("ENABLE_WEBHOOKS") != "false" && os.Getenv("WIDGETS_NO_WEBHOOKS") != "1" {
		hook := widgetWebhook{hang: os.Getenv("WIDGETS_WEBHOOK_HANG") == "1"}
		err = ctrl.NewWebhookManagedBy(mgr).For(&v1.Widget{}).WithDefaulter(hook).WithValidator(hook).Complete()
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
