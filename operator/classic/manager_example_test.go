package classic_test

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

var scheme = runtime.NewScheme()

// A kubebuilder main adopted by opzero: its flags, ctrl.Options and
// SetupWithManager calls stay; ctrl.NewManager becomes classic.NewManager, which
// also links --mode=classic.
func ExampleNewManager() {
	var serverless operator.Options // --mode=serverless|classic, --audience, ...
	serverless.BindFlags(flag.CommandLine)
	flag.Parse()
	mgr, err := classic.NewManager(serverless, ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
	if err != nil {
		os.Exit(1)
	}
	// if err := (&controller.MemcachedReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil { ... }
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
