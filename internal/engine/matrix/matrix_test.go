// Package matrix_test is the behaviour matrix both engines must honour
// (tests only: named for the matrix, beside the two engines it tests):
// classic (a controller-runtime manager) and serverless (the HTTP engine,
// with durable time off and on) x what a reconcile returns (success,
// RequeueAfter, Requeue: true, an error, a TerminalError). Each cell asserts
// what is written (status.observedGeneration with
// WithAutoObservedGeneration, Wakeup records when time is durable, the
// Kubernetes Event the fixture reconciler emits), what is answered
// (serverless: the HTTP code and the Opzero-Result header) and what comes
// next (another reconcile, or a Wakeup that will cause one).
//
// Durable time is a serverless notion only: classic mode runs in a
// long-lived process whose workqueue holds retries and requeues in memory,
// as controller-runtime does; --wakeup-sink does not apply to it. So classic
// has one column, serverless two.
package matrix_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/opzero/opzero/internal/testkit"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/classic"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/reconcileutil"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"../serverless/testdata/crds", "../../../config/crd"}, Scheme: scheme, NoControllerManager: true}))
}

var widgetGVK = schema.GroupVersionKind{Group: "test.opzero.dev", Version: "v1", Kind: "Widget"}

func newWidget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "size")
	return u
}

// cell is one row of the matrix: what the first reconcile of a Widget
// returns and what must follow. Every later reconcile waits for the test's
// go-ahead (so the first one's effects are checked alone), then succeeds.
type cell struct {
	name   string
	result func() (reconcile.Result, error)
	// observed: status.observedGeneration is written after the first reconcile.
	observed bool
	// next: another reconcile follows in memory (classic, serverless without
	// durable time).
	next bool
	// failure: the reconcile counts as a failure (serverless Stats).
	failure bool
	// code and durableCode: the serverless answer without and with durable time.
	code, durableCode int
	// resultHas / bodyHas: what the Opzero-Result header (2xx) or the body
	// says, without and with durable time.
	says, durableSays string
	// wakeup is the reason of the Wakeup left with durable time ("" none).
	wakeup string
}

var cells = []cell{
	{name: "success", result: func() (reconcile.Result, error) { return reconcile.Result{}, nil },
		observed: true, code: 200, durableCode: 200, says: "reconciled", durableSays: "reconciled"},
	{name: "requeue-after", result: func() (reconcile.Result, error) { return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil },
		observed: true, next: true, code: 200, durableCode: 200, says: "reconciled", durableSays: "reconciled", wakeup: v1alpha1.ReasonRequeueAfter},
	{name: "requeue", result: func() (reconcile.Result, error) { return reconcile.Result{Requeue: true}, nil }, //nolint:staticcheck // the deprecated field is honoured
		observed: true, next: true, code: 200, durableCode: 200, says: "reconciled", durableSays: "reconciled", wakeup: v1alpha1.ReasonRetry},
	{name: "error", result: func() (reconcile.Result, error) { return reconcile.Result{}, errors.New("backend down") },
		next: true, failure: true, code: 500, durableCode: 200, says: "backend down", durableSays: "retry recorded", wakeup: v1alpha1.ReasonRetry},
	{name: "terminal", result: func() (reconcile.Result, error) {
		return reconcile.Result{}, reconcile.TerminalError(errors.New("spec is invalid"))
	}, failure: true, code: 422, durableCode: 422, says: "spec is invalid", durableSays: "spec is invalid"},
}

// fixture is the reconciler under test: it reads its Widget (so automatic
// observedGeneration knows the generation), emits an Event, and returns its
// cell's result the first time.
type fixture struct {
	c        client.Client
	events   *reconcileutil.EventRecorder
	mu       sync.Mutex
	calls    map[string]int
	release  chan struct{} // later reconciles wait for it
	byName   map[string]cell
	readErrs []error
}

func newFixture(c client.Client, scheme *runtime.Scheme) *fixture {
	f := &fixture{c: c, events: reconcileutil.NewEventRecorder(c, scheme, "matrix"), calls: map[string]int{},
		release: make(chan struct{}), byName: map[string]cell{}}
	for _, c := range cells {
		f.byName[c.name] = c
	}
	return f
}

func (f *fixture) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	f.mu.Lock()
	f.calls[req.String()]++ // the classic manager sees every namespace's Widgets
	n := f.calls[req.String()]
	f.mu.Unlock()
	if n > 1 {
		select {
		case <-f.release:
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
		return reconcile.Result{}, nil
	}
	w := newWidget("", "")
	if err := f.c.Get(ctx, req.NamespacedName, w); err != nil {
		f.mu.Lock()
		f.readErrs = append(f.readErrs, err)
		f.mu.Unlock()
		return reconcile.Result{}, err
	}
	f.events.Eventf(w, nil, "Normal", "Reconciling", "Reconcile", "cell %s", req.Name)
	return f.byName[req.Name].result()
}

func (f *fixture) count(ns, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[ns+"/"+name]
}

func (f *fixture) errs() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.readErrs...)
}

func eventually(t *testing.T, f *fixture, what string, cond func() bool) {
	t.Helper()
	if !testkit.Wait(20*time.Second, cond) {
		t.Fatalf("timed out waiting for %s (the fixture's reads failed with %v)", what, f.errs())
	}
}

// observedGeneration reads the Widget's status.observedGeneration (0 if unset).
func observedGeneration(t *testing.T, env *testenv.Env, ns, name string) int64 {
	t.Helper()
	w := newWidget(ns, name)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, w); err != nil {
		t.Fatal(err)
	}
	og, _, _ := unstructured.NestedInt64(w.Object, "status", "observedGeneration")
	return og
}

// emitted reports whether the fixture's Event about the Widget was written.
func emitted(t *testing.T, env *testenv.Env, ns, name string) bool {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == "Reconciling" && e.Note == "cell "+name {
			return true
		}
	}
	return false
}

// TestMatrixServerless: the serverless engine, durable time off and on.
func TestMatrixServerless(t *testing.T) {
	for _, durable := range []bool{false, true} {
		for _, c := range cells {
			t.Run(fmt.Sprintf("durable=%v/%s", durable, c.name), func(t *testing.T) {
				serverlessCell(t, c, durable)
			})
		}
	}
}

func serverlessCell(t *testing.T, c cell, durable bool) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	cl := standin.NewClient(env.Client)
	f := newFixture(cl, env.Scheme)
	op, err := builder.New(env.Scheme).For(newWidget("", "")).WithAutoObservedGeneration().Build(f)
	if err != nil {
		t.Fatal(err)
	}
	policy := backoff.Policy{Base: 50 * time.Millisecond, Cap: time.Second}
	opts := serverless.Options{Backoff: &policy}
	if durable {
		opts.Durable = wakeup.NewStore(cl, wakeup.StoreOptions{Operator: op.Name, Target: widgetGVK, Sink: "http://unused", Policy: policy})
	}
	e, err := serverless.New(op, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release) })

	w := newWidget(ns, c.name)
	if err := env.Client.Create(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	raw, err := (&unstructured.Unstructured{Object: w.Object}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Add, raw, "widgets")
	if err != nil {
		t.Fatal(err)
	}
	req, err := cloudevent.NewRequest(context.Background(), srv.URL, ev, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	body.Write(buf[:n])
	resp.Body.Close()
	result := resp.Header.Get(serverless.ResultHeader)

	// What is answered.
	wantCode, wantSays := c.code, c.says
	if durable {
		wantCode, wantSays = c.durableCode, c.durableSays
	}
	if resp.StatusCode != wantCode {
		t.Errorf("answered %d (%q %q), want %d", resp.StatusCode, result, body.String(), wantCode)
	}
	if said := result + body.String(); !strings.Contains(said, wantSays) {
		t.Errorf("the answer says %q, want it to mention %q", said, wantSays)
	}
	if got := e.Stats().Failures.Load(); (got > 0) != c.failure {
		t.Errorf("Stats().Failures = %d; a %s is a failure: %v", got, c.name, c.failure)
	}

	// What is written.
	want := int64(0)
	if c.observed {
		want = w.GetGeneration()
	}
	if og := observedGeneration(t, env, ns, c.name); og != want {
		t.Errorf("status.observedGeneration = %d after a %s, want %d", og, c.name, want)
	}
	if !emitted(t, env, ns, c.name) {
		t.Errorf("the fixture's Event about %s was not written", c.name)
	}
	wk := &v1alpha1.Wakeup{}
	werr := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: wakeup.Name(op.Name, client.ObjectKeyFromObject(w))}, wk)
	switch {
	case !durable || c.wakeup == "":
		if !apierrors.IsNotFound(werr) {
			t.Errorf("a Wakeup is left (%v, reason %q), want none", werr, wk.Spec.Reason)
		}
	case werr != nil:
		t.Errorf("no Wakeup after a %s with durable time: %v", c.name, werr)
	case wk.Spec.Reason != c.wakeup:
		t.Errorf("the Wakeup's reason is %q, want %q", wk.Spec.Reason, c.wakeup)
	}

	// What comes next: in memory, another reconcile.
	if c.next && !durable {
		eventually(t, f, "the next reconcile", func() bool { return f.count(ns, c.name) >= 2 })
	}
	if durable && f.count(ns, c.name) != 1 {
		t.Errorf("%d reconciles with durable time, want 1 (what follows is a Wakeup)", f.count(ns, c.name))
	}
}

// TestMatrixClassic: the classic engine on a controller-runtime manager.
// Nothing is answered over HTTP; what follows a reconcile is the workqueue's.
func TestMatrixClassic(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	// Only this test's namespace: other tests' Widgets stay (no namespace
	// controller deletes them) and would take the workers.
	mgr, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(standin.NewClient(mgr.GetClient()), env.Scheme)
	op, err := builder.New(env.Scheme).For(newWidget("", "")).WithAutoObservedGeneration().Named("matrix").Build(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := classic.Setup(mgr, op, classic.Options{MaxConcurrentReconciles: len(cells)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		close(f.release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	for _, c := range cells {
		t.Run(c.name, func(t *testing.T) {
			w := newWidget(ns, c.name)
			if err := env.Client.Create(context.Background(), w); err != nil {
				t.Fatal(err)
			}
			eventually(t, f, "the first reconcile", func() bool { return f.count(ns, c.name) >= 1 })
			switch {
			case c.observed:
				eventually(t, f, "status.observedGeneration", func() bool {
					return observedGeneration(t, env, ns, c.name) == w.GetGeneration()
				})
			case c.next:
				// The retry has started, so the first reconcile has settled.
				eventually(t, f, "the retry", func() bool { return f.count(ns, c.name) >= 2 })
				if og := observedGeneration(t, env, ns, c.name); og != 0 {
					t.Errorf("status.observedGeneration = %d after a %s, want none", og, c.name)
				}
			default: // terminal: nothing follows; nothing to write
				if og := observedGeneration(t, env, ns, c.name); og != 0 {
					t.Errorf("status.observedGeneration = %d after a %s, want none", og, c.name)
				}
			}
			eventually(t, f, "the fixture's Event", func() bool { return emitted(t, env, ns, c.name) })
			if c.next {
				eventually(t, f, "the next reconcile", func() bool { return f.count(ns, c.name) >= 2 })
			}
		})
	}
}
