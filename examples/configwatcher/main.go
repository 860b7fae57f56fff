// Command configwatcher is the Kubernetes Patterns ConfigWatcher operator:
// when a ConfigMap changes, it restarts the pods a ConfigWatcher selects.
//
//	go run ./examples/configwatcher --mode=serverless                      # HTTP CloudEvents on $PORT (default 8080)
//	go run -tags opzero_classic ./examples/configwatcher --mode=classic   # controller-runtime manager, leader election
//
// Outside a cluster it uses KUBECONFIG. Its default build is serverless
// only, as every opzero operator's is: classic mode is linked by importing
// package operator/classic, which this example does in classic.go, built
// with -tags opzero_classic (2-3 MiB more RSS per instance, in either
// mode; docs/benchmarks.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/examples/configwatcher/controller"
	"github.com/opzero/opzero/internal/profile"
	"github.com/opzero/opzero/operator"
)

func main() {
	err := run()
	profile.Stop() // with -tags opzero_pprof, writes the profiles asked for; a no-op otherwise
	if err != nil {
		fmt.Fprintln(os.Stderr, "configwatcher:", err)
		os.Exit(1)
	}
}

func run() error {
	var opts operator.Options
	opts.BindFlags(flag.CommandLine)
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	ctrllog.SetLogger(log)
	opts.Logger = log
	opts.Scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(opts.Scheme); err != nil {
		return err
	}
	if err := v1.AddToScheme(opts.Scheme); err != nil {
		return err
	}

	rt, err := operator.New(opts)
	if err != nil {
		return err
	}
	r := &controller.ConfigWatcherReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("configwatcher")}
	err = builder.ControllerManagedBy(rt).
		Named("configwatcher").
		For(&v1.ConfigWatcher{}).
		// a ConfigWatcher names its ConfigMap in spec.configMap: the hub
		// wakes the operator only for ConfigMaps some ConfigWatcher names
		Watches(&corev1.ConfigMap{}, controller.ConfigMapToConfigWatchers, builder.ReferencedBy("spec.configMap")).
		Complete(r)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("starting", "mode", rt.Mode())
	return rt.Start(ctx)
}
