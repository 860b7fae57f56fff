// Command stubborn is an adopted project that registers its webhook even
// with ENABLE_WEBHOOKS=false, so its serverless Service would refuse to
// start: opzero manifests says so.
package main

import (
	"context"
	"flag"
	"net/http"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

func main() {
	var serverless operator.Options
	serverless.BindFlags(flag.CommandLine)
	flag.Parse()
	mgr, err := classic.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{})
	if err == nil {
		err = ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}))
	}
	if err == nil {
		mgr.GetWebhookServer().Register("/validate-v1-configmap", http.NotFoundHandler())
		err = mgr.Start(ctrl.SetupSignalHandler())
	}
	if err != nil {
		os.Exit(1)
	}
}
