// Command testop is the operator the wakeup and scale-out tests kill and
// restart: a ConfigWatcher reconciler whose spec.configMap scripts what it
// returns. Each reconcile appends its time to status (restarts counts them):
//
//	requeue-3s   RequeueAfter 3s on the first reconcile, then done
//	fail-3       fail while fewer than 3 reconciles happened, then succeed
//	fail-1       fail on the first reconcile, then succeed
//	requeue-1h   RequeueAfter 1h on every reconcile (a schedule's next run)
//	delete-self  delete the object, then write its status (which finds it
//	             gone)
//	converge     take 20 ms, then set status.observedGeneration (chaos test)
//	external     take 50 ms (an external system's answer), then set
//	             status.observedGeneration (scale-out)
//
// With $TESTOP_SPANS set, each reconcile appends "start|end <key> <pid>
// <unix-nanos>" lines to that file, for the overlap check across processes;
// TESTOP_SPANS=stderr writes "testop-span start|end <key> <hostname>
// <unix-nanos>" lines to stderr instead, for pods (a file is per container;
// the hostname is the pod's name).
//
// With $TESTOP_SCALEOUT set for `opzero manifests` (real Knative's
// scale-out test), the operator declares containerConcurrency 1, so that
// Knative's autoscaler adds pods under load up to max-scale (the default,
// 3), and TESTOP_SPANS=stderr in its pods.
// With $TESTOP_HANG set, every reconcile blocks until the process dies (an
// instance to be killed mid-reconcile).
//
// With $TESTOP_SOAK set (the fault soak; set it for `opzero manifests` too),
// the operator also owns ConfigMaps, has the engine write
// status.observedGeneration, and spec.configMap "soak" reconciles as a real
// operator would (soak.go): a finalizer, one child ConfigMap, and, if
// spec.podSelector has "wake", a RequeueAfter whose firing it records.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/profile"
	"github.com/opzero/opzero/internal/spanlog"
	"github.com/opzero/opzero/operator"
)

type scripted struct{ client.Client }

var hostname, _ = os.Hostname()

func span(what string, req reconcile.Request) {
	switch f := os.Getenv("TESTOP_SPANS"); f {
	case "":
	case "stderr":
		fmt.Fprintf(os.Stderr, "testop-span %s %s %s %d\n", what, req.String(), hostname, time.Now().UnixNano())
	default:
		spanlog.Append(f, what, req.String())
	}
}

func (r *scripted) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	span("start", req)
	defer span("end", req)
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if os.Getenv("TESTOP_HANG") != "" {
		select {} // this instance is to be killed
	}
	switch cw.Spec.ConfigMap {
	case "soak":
		return r.soak(ctx, cw)
	case "converge":
		time.Sleep(20 * time.Millisecond)
		cw.Status.ObservedGeneration = cw.Generation
	case "external":
		time.Sleep(50 * time.Millisecond)
		cw.Status.ObservedGeneration = cw.Generation
	case "slow":
		time.Sleep(2 * time.Second)
		cw.Status.ObservedGeneration = cw.Generation
	}
	if cw.Spec.ConfigMap == "delete-self" {
		if err := r.Delete(ctx, cw.DeepCopy()); err != nil {
			return reconcile.Result{}, err
		}
	}
	cw.Status.Restarts++
	n := cw.Status.Restarts
	now := metav1.Now()
	cw.Status.LastRestartTime = &now
	cw.Status.ConfigMapVersion += fmt.Sprintf("%d,", time.Now().UnixMilli()) // the reconcile log
	if err := r.Status().Update(ctx, cw); err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case cw.Spec.ConfigMap == "requeue-3s" && n == 1:
		return reconcile.Result{RequeueAfter: 3 * time.Second}, nil
	case cw.Spec.ConfigMap == "requeue-1h":
		return reconcile.Result{RequeueAfter: time.Hour}, nil
	case cw.Spec.ConfigMap == "fail-3" && n < 4:
		return reconcile.Result{}, errors.New("scripted failure")
	case cw.Spec.ConfigMap == "fail-1" && n == 1:
		return reconcile.Result{}, errors.New("scripted failure")
	}
	return reconcile.Result{}, nil
}

func main() {
	var opts operator.Options
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	opts.Logger = logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	opts.Scheme = runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(opts.Scheme)
	_ = v1.AddToScheme(opts.Scheme)
	rt, err := operator.New(opts)
	if err == nil {
		b := builder.ControllerManagedBy(rt).Named("testop").For(&v1.ConfigWatcher{})
		if os.Getenv("TESTOP_SOAK") != "" {
			b = b.Owns(&corev1.ConfigMap{}).WithAutoObservedGeneration()
		}
		if os.Getenv("TESTOP_SCALEOUT") != "" {
			b = b.WithConcurrency(1).WithEnv("TESTOP_SPANS", "stderr")
		}
		err = b.Complete(&scripted{Client: rt.GetClient()})
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = rt.Start(ctx)
	}
	profile.Stop() // with -tags opzero_pprof (bench/suite -pprof), writes the profiles asked for
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
