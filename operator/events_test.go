package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

// TestEventWrittenBeforeTheAnswer: in serverless mode a reconcile that
// records an Event goes on to its status write while the Event is being
// written, and the event's answer waits until the Event is written.
func TestEventWrittenBeforeTheAnswer(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	hold := &holdPath{path: "/apis/events.k8s.io/v1/namespaces/" + ns + "/events", open: make(chan struct{})}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { hold.next = rt; return hold })
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	rt, err := operator.New(operator.Options{Mode: operator.Serverless, Scheme: scheme, Config: cfg, Addr: addr, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := rt.GetEventRecorder("events-test")
	err = builder.ControllerManagedBy(rt).For(&v1.ConfigWatcher{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			cw := &v1.ConfigWatcher{}
			if err := rt.GetClient().Get(ctx, req.NamespacedName, cw); err != nil {
				return reconcile.Result{}, err
			}
			rec.Eventf(cw, nil, corev1.EventTypeNormal, "Seen", "Reconcile", "seen")
			cw.Status.ObservedGeneration = cw.Generation
			return reconcile.Result{}, rt.GetClient().Status().Update(ctx, cw)
		}))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, rt.Start)

	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "c", PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	cw.TypeMeta = metav1.TypeMeta{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher"}
	b, err := json.Marshal(cw)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Add, b, "configwatchers")
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() { answered <- postOnceListening(addr, ev) }()

	testkit.Eventually(t, 30*time.Second, "the status written while the Event's write is held", func(ctx context.Context) (bool, error) {
		got := &v1.ConfigWatcher{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), got); err != nil {
			return false, err
		}
		return hold.n.Load() == 1 && got.Status.ObservedGeneration == 1,
			fmt.Errorf("Event writes held %d, status.observedGeneration %d", hold.n.Load(), got.Status.ObservedGeneration)
	})
	select {
	case code := <-answered:
		t.Fatalf("answered %d before the Event was written", code)
	case <-time.After(200 * time.Millisecond):
	}
	close(hold.open)
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	evs := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "Seen" && e.Regarding.Name == "events" {
			return
		}
	}
	t.Fatalf("no Seen Event once answered: %d Events", len(evs.Items))
}

// TestForbiddenIsAnEvent: a reconcile the API server refuses for the
// operator's RBAC (403) leaves a Warning Event on its object, written
// before the answer, where kubectl describe shows it; the error is still
// the reconcile's (retried).
func TestForbiddenIsAnEvent(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	rt, err := operator.New(operator.Options{Mode: operator.Serverless, Scheme: scheme, Config: env.Config, Addr: addr, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	err = builder.ControllerManagedBy(rt).For(&v1.ConfigWatcher{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
				errors.New(`User "system:serviceaccount:x:op" cannot patch resource "deployments"`))
		}))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, rt.Start)
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "c", PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	cw.TypeMeta = metav1.TypeMeta{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher"}
	b, _ := json.Marshal(cw)
	ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Add, b, "configwatchers")
	if err != nil {
		t.Fatal(err)
	}
	code := postOnceListening(addr, ev)
	if code == http.StatusOK {
		t.Fatalf("a refused reconcile answered 200: its error must stay a failure")
	}
	evs := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == operator.ReasonForbidden && e.Type == corev1.EventTypeWarning && e.Regarding.Name == "refused" && e.Regarding.UID == cw.UID &&
			strings.Contains(e.Note, `cannot patch resource "deployments"`) {
			return
		}
	}
	t.Fatalf("no Warning Forbidden Event on the object once answered %d (%d Events)", code, len(evs.Items))
}

// postOnceListening posts ev to addr once the operator listens there (up
// to 30 s) and returns the answer's status code (0: never answered).
func postOnceListening(addr string, ev *event.Event) int {
	code := 0
	testkit.Wait(30*time.Second, func() bool {
		req, err := cloudevent.NewRequest(context.Background(), "http://"+addr, ev, false)
		if err != nil {
			return true
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		code = resp.StatusCode
		return true
	})
	return code
}
