package matrix_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/classic"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// seen records the keys reconciled.
type seen struct {
	mu   sync.Mutex
	keys map[reconcile.Request]int
}

func (s *seen) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[req]++
	return reconcile.Result{}, nil
}

func (s *seen) count(k reconcile.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[k]
}

// externalOperator takes Broker events of types com.example.db.*; the
// subject names a Widget in ns ("bad": a TerminalError, "fail": an error,
// "": no key).
func externalOperator(t *testing.T, env *testenv.Env, ns string, r reconcile.Reconciler) *builder.Controller {
	t.Helper()
	m := func(_ context.Context, _ client.Reader, e event.Event) ([]reconcile.Request, error) {
		switch e.Subject() {
		case "":
			return nil, nil
		case "bad":
			return nil, reconcile.TerminalError(errors.New("subject names no database"))
		case "fail":
			return nil, errors.New("the API server could not be read")
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: e.Subject()}}}, nil
	}
	op, err := builder.New(env.Scheme).For(newWidget("", "")).Named("external").
		WatchesEvents("db", builder.EventFilter{Filters: []builder.TriggerFilter{{Prefix: map[string]string{"type": "com.example.db."}}}}, m).
		Build(r)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func externalEvent(typ, subject string) *event.Event {
	e := event.New()
	e.SetID("1")
	e.SetType(typ)
	e.SetSource("/test")
	e.SetSubject(subject)
	return &e
}

// TestExternalEventsBothModes: the same Broker events get the same answers
// from both engines (the serverless handler, the classic endpoint beside
// the manager): a matching event reconciles its key, one no filter passes
// and a map function's TerminalError are 400, another map error 503, no
// key 200 with the reason, not a CloudEvent 400.
func TestExternalEventsBothModes(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	// No Widgets exist: a key reconciled here came from an event, not from
	// the classic manager's initial list.
	// serverless
	sr := &seen{keys: map[reconcile.Request]int{}}
	e, err := serverless.New(externalOperator(t, env, ns, sr), standin.NewClient(env.Client), serverless.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	// classic
	mgr, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := &seen{keys: map[reconcile.Request]int{}}
	addr := make(chan net.Addr, 1)
	if err := classic.Setup(mgr, externalOperator(t, env, ns, cr), classic.Options{
		Events: classic.EventsOptions{Addr: "127.0.0.1:0", Ready: func(a net.Addr) { addr <- a }}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	classicURL := "http://" + (<-addr).String()

	for _, mode := range []struct {
		name string
		url  string
		r    *seen
	}{{"serverless", srv.URL, sr}, {"classic", classicURL, cr}} {
		t.Run(mode.name, func(t *testing.T) {
			post := func(ev *event.Event) (int, string) {
				var code int
				var msg string
				// classic answers 503 until its controller has started
				testkit.Eventually(t, 30*time.Second, "an answer other than not started", func(ctx context.Context) (bool, error) {
					req, err := cloudevent.NewRequest(ctx, mode.url, ev, false)
					if err != nil {
						return false, err
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return false, err
					}
					defer resp.Body.Close()
					var b [512]byte
					n, _ := resp.Body.Read(b[:])
					code, msg = resp.StatusCode, string(b[:n])+resp.Header.Get(serverless.ResultHeader)
					return !strings.Contains(msg, "has not started"), nil
				})
				return code, msg
			}
			for _, tc := range []struct {
				name, typ, subject string
				code               int
				want               string
			}{
				{"matching", "com.example.db.changed", "w1", 200, "via db"},
				{"filtered out", "com.example.web.hook", "w2", 400, "passing db (filters[prefix type=com.example.db.])"},
				{"no key", "com.example.db.changed", "", 200, "maps to no key"},
				{"terminal", "com.example.db.changed", "bad", 400, "subject names no database"},
				{"map error", "com.example.db.changed", "fail", 503, "could not be read"},
			} {
				if code, msg := post(externalEvent(tc.typ, tc.subject)); code != tc.code || !strings.Contains(msg, tc.want) {
					t.Errorf("%s: %d %q, want %d mentioning %q", tc.name, code, msg, tc.code, tc.want)
				}
			}
			resp, err := http.Post(mode.url, "text/plain", strings.NewReader("hello"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Errorf("not a CloudEvent: %d, want 400", resp.StatusCode)
			}
			w1 := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "w1"}}
			testkit.Eventually(t, 30*time.Second, "w1 reconciled", func(context.Context) (bool, error) { return mode.r.count(w1) >= 1, nil })
			if n := mode.r.count(reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "w2"}}); n != 0 {
				t.Errorf("w2, named by a filtered-out event, was reconciled %d times", n)
			}
		})
	}
}
