// Command crbaseline is the baseline opzero is measured against: the
// ConfigWatcher operator on a plain controller-runtime manager, written the
// way kubebuilder scaffolds it (same reconciler, same watches, no opzero
// package on the path, MaxConcurrentReconciles 4). It prints READY once its
// caches have synced.
//
// With -metadata-only it is what a careful classic author writes instead:
// the ConfigMap watch is builder.OnlyMetadata (the cache keeps each
// ConfigMap's metadata, not its data) and the client reads ConfigMaps from
// the API server (client.CacheOptions.DisableFor), so the reconcile's GET
// starts no second, full informer.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clientevents "k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	cwcontroller "github.com/opzero/opzero/examples/configwatcher/controller"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	metadataOnly := flag.Bool("metadata-only", false, "watch ConfigMaps' metadata only (builder.OnlyMetadata) and read them from the API server, not from a cache")
	flag.Parse()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	opts := manager.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"}
	var cmOpts []builder.WatchesOption
	if *metadataOnly {
		opts.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}}}
		cmOpts = append(cmOpts, builder.OnlyMetadata)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		return err
	}
	// The events.k8s.io recorder controller-runtime's manager gives from
	// v0.23 on (GetEventRecorder), built the same way from client-go, so
	// that the baseline builds with every supported controller-runtime.
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	events := clientevents.NewBroadcaster(&clientevents.EventSinkImpl{Interface: cs.EventsV1()})
	events.StartRecordingToSink(make(chan struct{}))
	r := &cwcontroller.ConfigWatcherReconciler{Client: mgr.GetClient(), Recorder: events.NewRecorder(scheme, "configwatcher")}
	err = ctrl.NewControllerManagedBy(mgr).For(&v1.ConfigWatcher{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			keys, _ := cwcontroller.ConfigMapToConfigWatchers(ctx, mgr.GetClient(), o)
			return keys
		}), cmOpts...).Complete(r)
	if err != nil {
		return err
	}
	// Ready means the informer caches (ConfigWatchers, ConfigMaps) are synced.
	_ = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			fmt.Println("READY")
		}
		return nil
	}))
	return mgr.Start(ctrl.SetupSignalHandler())
}
