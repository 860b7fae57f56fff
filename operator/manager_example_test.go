//go:build !opzero_serverless

package operator_test

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opzero/opzero/operator"
)

// A kubebuilder main adopted by opzero: its flags, ctrl.Options and
// SetupWithManager calls stay; ctrl.NewManager becomes operator.NewManager.
func ExampleNewManager() {
	var serverless operator.Options // --mode=serverless|classic, --audience, ...
	serverless.BindFlags(flag.CommandLine)
	flag.Parse()
	mgr, err := operator.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
	if err != nil {
		os.Exit(1)
	}
	// if err := (&controller.MemcachedReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil { ... }
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
