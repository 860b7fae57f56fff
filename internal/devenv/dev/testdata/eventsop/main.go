// Command eventsop is the tiny operator of the Broker test: it reconciles
// ConfigMaps labelled app=eventsop and takes external CloudEvents from its
// Broker (WatchesEvents "drift": types com.example.drift.*, the subject
// names the ConfigMap as namespace/name; the subject "fail" makes the map
// function fail, so the engine answers 503 and the Broker retries). Each
// reconcile appends "namespace/name" to the file $EVENTSOP_LOG, each failing
// map call "fail <unix nanoseconds>".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "k8s.io/api/core/v1"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/operator"
)

// note appends a line to $EVENTSOP_LOG.
func note(line string) error {
	f, err := os.OpenFile(os.Getenv("EVENTSOP_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

func main() {
	var opts operator.Options
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(opts operator.Options) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	opts.Scheme = scheme
	rt, err := operator.New(opts)
	if err != nil {
		return err
	}
	c := rt.GetClient()
	record := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if err := c.Get(ctx, req.NamespacedName, &v1.ConfigMap{}); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		return reconcile.Result{}, note(req.String())
	})
	bySubject := func(_ context.Context, _ client.Reader, e event.Event) ([]reconcile.Request, error) {
		if e.Subject() == "fail" { // each attempt noted with its time, for the backoff check
			if err := note(fmt.Sprintf("fail %d", time.Now().UnixNano())); err != nil {
				return nil, err
			}
			return nil, errors.New("the map function failed on purpose")
		}
		ns, name, ok := strings.Cut(e.Subject(), "/")
		if !ok {
			return nil, nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}, nil
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "eventsop"})
	if err := builder.ControllerManagedBy(rt).Named("eventsop").For(&v1.ConfigMap{}, builder.WithLabelSelector(sel)).
		WatchesEvents("drift", builder.EventFilter{Filters: []builder.TriggerFilter{{Prefix: map[string]string{"type": "com.example.drift."}}}}, bySubject).
		WithSweep("", "").
		Complete(record); err != nil {
		return err
	}
	return rt.Start(context.Background())
}
