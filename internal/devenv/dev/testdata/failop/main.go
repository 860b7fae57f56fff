// Command failop stands in for an operator whose reconciler always fails:
// every reconcile of a ConfigMap returns the error "scripted failure of
// <namespace>/<name>", so its retries go on for as long as it runs (the
// status line test).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/operator"
)

func main() {
	var opts operator.Options
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	opts.Scheme = runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(opts.Scheme)
	rt, err := operator.New(opts)
	if err == nil {
		fail := reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, fmt.Errorf("scripted failure of %s", req)
		})
		err = builder.ControllerManagedBy(rt).Named("failop").For(&corev1.ConfigMap{}).Complete(fail)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = rt.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
