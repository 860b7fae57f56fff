// Command postgres is an operator for a PostgreSQL server outside
// Kubernetes: a Database object becomes a database, the role that owns it
// and a Secret with its credentials; what someone changes by hand in the
// server is put back, by the sweep and, at once, when the bridge
// (./bridge) reports a change as a CloudEvent through a Knative Broker.
// One binary, either mode:
//
//	go run . --mode=serverless   # HTTP CloudEvents on $PORT (default 8080)
//	go run . --mode=classic      # controller-runtime manager, leader election
//
// It finds the server in $PG_ADMIN_DSN, a superuser's connection URL that
// the generated manifests take from the key "dsn" of the Secret
// "postgres-admin" in the operator's namespace. $PG_PUBLIC_HOST and
// $PG_PUBLIC_PORT, when set, are what the credentials Secrets tell
// applications instead of the DSN's host and port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opzero/opzero/builder"
	v1alpha1 "github.com/opzero/opzero/examples/postgres/api/v1alpha1"
	"github.com/opzero/opzero/examples/postgres/controller"
	"github.com/opzero/opzero/operator"
	_ "github.com/opzero/opzero/operator/classic" // --mode=classic: links controller-runtime's manager
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "postgres operator:", err)
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
	if err := v1alpha1.AddToScheme(opts.Scheme); err != nil {
		return err
	}
	rt, err := operator.New(opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	server, err := connect(ctx)
	if err != nil {
		return err
	}
	defer server.Close()
	r := &controller.DatabaseReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("postgres-operator"), Server: server}
	err = builder.ControllerManagedBy(rt).
		Named("postgres").
		For(&v1alpha1.Database{}).
		Owns(&corev1.Secret{}).
		WatchesEvents("changed", builder.EventFilter{Attributes: map[string]string{"type": controller.ChangedEventType}}, controller.DatabasesForEvent).
		WithSecretEnv("PG_ADMIN_DSN", "postgres-admin", "dsn").
		WithSweep("*/10 * * * *", "*/30 * * * *"). // the full sweep puts back drift the bridge did not report
		Complete(r)
	if err != nil {
		return err
	}
	log.Info("starting", "mode", rt.Mode())
	return rt.Start(ctx)
}

// connect reads the server's address from the environment. Describing the
// operator (OPZERO_DESCRIBE, for `opzero manifests`) needs no server.
func connect(ctx context.Context) (*controller.Server, error) {
	dsn := os.Getenv("PG_ADMIN_DSN")
	if dsn == "" {
		if os.Getenv("OPZERO_DESCRIBE") != "" {
			dsn = "postgres://describe@localhost/postgres"
		} else {
			return nil, errors.New("PG_ADMIN_DSN is not set: set it to a PostgreSQL superuser's URL (postgres://postgres:password@host:5432/postgres); the manifests take it from the key dsn of the Secret postgres-admin")
		}
	}
	port := 0
	if p := os.Getenv("PG_PUBLIC_PORT"); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil || port <= 0 || port > 65535 {
			return nil, fmt.Errorf("PG_PUBLIC_PORT=%q is not a port number", p)
		}
	}
	return controller.NewServer(ctx, dsn, os.Getenv("PG_PUBLIC_HOST"), port)
}
