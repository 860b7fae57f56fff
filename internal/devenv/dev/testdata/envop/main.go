// Command envop stands in for an operator in the environment test. It
// describes itself like one (it declares API_TOKEN from the Secret envop,
// key token, with builder.WithSecretEnv), and otherwise reports the
// environment it was started with, as a JSON list of NAME=VALUE: on GET /
// at :$PORT (a Knative Service), or written to --report (a Deployment).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/operator"
	_ "github.com/opzero/opzero/operator/classic" // it also stands in for a classic Deployment
)

func main() {
	var opts operator.Options
	opts.BindFlags(flag.CommandLine)
	report := flag.String("report", "", "write the environment as JSON to this file, then wait for SIGTERM")
	flag.Parse()
	if err := run(opts, *report); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(opts operator.Options, report string) error {
	env := os.Environ()
	sort.Strings(env)
	b, _ := json.Marshal(env)
	if os.Getenv(description.Env) != "" {
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return err
		}
		opts.Scheme = scheme
		rt, err := operator.New(opts)
		if err != nil {
			return err
		}
		noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
		if err := builder.ControllerManagedBy(rt).Named("envop").For(&corev1.ConfigMap{}).
			WithSecretEnv("API_TOKEN", "envop", "token").Complete(noop); err != nil {
			return err
		}
		return rt.Start(context.Background())
	}
	if report != "" {
		if err := os.WriteFile(report+".tmp", b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(report+".tmp", report); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		<-ctx.Done()
		return nil
	}
	http.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.Write(b) })
	return http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil)
}
