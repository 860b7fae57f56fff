// Package app is the CronJob-style project's cmd/main.go as kubebuilder
// writes it, adopted by opzero as docs/migrating.md says (operator.Options
// bound to the flags, classic.NewManager for ctrl.NewManager); the two
// commands run it with their reconciler.
package app

import (
	"flag"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/opzero/opzero/bench/testdata/cronjob/api/v1"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
)

// Main runs the manager with the reconciler setup adds.
func Main(leaderID string, setup func(ctrl.Manager) error) {
	var metricsAddr, probeAddr string
	var enableLeaderElection bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Enable leader election for controller manager.")
	var serverless operator.Options // --mode=serverless|classic, ... (opzero)
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
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       leaderID,
	})
	if err == nil {
		err = setup(mgr)
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
