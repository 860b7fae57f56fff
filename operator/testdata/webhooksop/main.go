// Command webhooksop is a controller-runtime project's main as kubebuilder
// writes it, adopted by opzero (the test of --mode=webhooks runs it twice:
// serverless with ENABLE_WEBHOOKS=false, and --mode=webhooks). Its
// controller makes an owned ConfigMap per ConfigWatcher; its webhook
// defaults the pod selector and refuses the ConfigMap "forbidden".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"

	"github.com/go-logr/logr"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

type reconciler struct{ client.Client }

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cw.Name + "-owned", Namespace: cw.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Data = map[string]string{"configMap": cw.Spec.ConfigMap}
		return controllerutil.SetControllerReference(cw, cm, r.Scheme())
	})
	return ctrl.Result{}, err
}

type configWatcherWebhook struct{}

func (configWatcherWebhook) Default(_ context.Context, cw *v1.ConfigWatcher) error {
	if len(cw.Spec.PodSelector) == 0 {
		cw.Spec.PodSelector = map[string]string{"app": cw.Name}
	}
	return nil
}

func (configWatcherWebhook) ValidateCreate(_ context.Context, cw *v1.ConfigWatcher) (admission.Warnings, error) {
	if cw.Spec.ConfigMap == "forbidden" {
		return nil, errors.New("configMap forbidden is not allowed")
	}
	return nil, nil
}

// registerWebhooks serves configWatcherWebhook at the paths
// controller-runtime's webhook builder gives ConfigWatcher, as admission
// handlers: the builder's form changed in controller-runtime v0.23
// (ctrl.NewWebhookManagedBy(mgr, obj)), and this program builds with every
// version opzero supports (TestKubebuilderWebhookAdopted builds
// kubebuilder's own scaffold of each).
func registerWebhooks(mgr ctrl.Manager) {
	decode := func(req admission.Request) (*v1.ConfigWatcher, error) {
		cw := &v1.ConfigWatcher{}
		return cw, json.Unmarshal(req.Object.Raw, cw)
	}
	mgr.GetWebhookServer().Register("/mutate-k8spatterns-io-v1-configwatcher", &webhook.Admission{Handler: admission.HandlerFunc(
		func(ctx context.Context, req admission.Request) admission.Response {
			cw, err := decode(req)
			if err == nil {
				err = configWatcherWebhook{}.Default(ctx, cw)
			}
			var b []byte
			if err == nil {
				b, err = json.Marshal(cw)
			}
			if err != nil {
				return admission.Errored(http.StatusBadRequest, err)
			}
			return admission.PatchResponseFromRaw(req.Object.Raw, b)
		})})
	mgr.GetWebhookServer().Register("/validate-k8spatterns-io-v1-configwatcher", &webhook.Admission{Handler: admission.HandlerFunc(
		func(ctx context.Context, req admission.Request) admission.Response {
			if req.Operation == admissionv1.Delete {
				return admission.Allowed("")
			}
			cw, err := decode(req)
			if err != nil {
				return admission.Errored(http.StatusBadRequest, err)
			}
			if _, err := (configWatcherWebhook{}).ValidateCreate(ctx, cw); err != nil {
				return admission.Denied(err.Error())
			}
			return admission.Allowed("")
		})})
}

func main() {
	var metricsAddr, probeAddr, certPath string
	var enableLeaderElection bool
	var webhookPort int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Enable leader election for controller manager.")
	flag.StringVar(&certPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "The port the webhook server listens on.")
	var serverless operator.Options // --mode=serverless|classic|webhooks, --audience, ... (opzero)
	serverless.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))) // kubebuilder: zap
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	mgr, err := classic.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: webhookPort, CertDir: certPath}),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "webhooksop.k8spatterns.io",
	})
	if err == nil {
		err = ctrl.NewControllerManagedBy(mgr).For(&v1.ConfigWatcher{}).Owns(&corev1.ConfigMap{}).Named("webhooksop").
			Complete(&reconciler{Client: mgr.GetClient()})
	}
	if err == nil && os.Getenv("ENABLE_WEBHOOKS") != "false" {
		registerWebhooks(mgr)
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
