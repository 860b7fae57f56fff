package serverless_test

import (
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/wakeup"
)

// TestAsyncAnswersOnceDurable: in async mode the answer (202) comes while
// the reconcile is still blocked, after an Accepted wakeup was written; the
// successful reconcile then removes it.
func TestAsyncAnswersOnceDurable(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 10)
	p.gate = make(chan struct{})
	h := newHarness(t, p, nil, serverless.Options{})
	store := wakeup.NewStore(h.client, wakeup.StoreOptions{Operator: "widget", Target: widgetGVK, Sink: "http://unused", Policy: backoff.DefaultPolicy()})
	h.engine = mustEngine(t, h, serverless.Options{Durable: store, Async: true})
	key := req(h.ns, "async")
	a := h.post(h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "async"), "widgets"), false)
	if a.code != http.StatusAccepted {
		t.Fatalf("async answer %d %s, want 202", a.code, a.body)
	}
	rec := &v1alpha1.Wakeup{}
	wk := client.ObjectKey{Namespace: h.ns, Name: wakeup.Name("widget", key.NamespacedName)}
	if err := h.env.Client.Get(t.Context(), wk, rec); err != nil || rec.Spec.Reason != v1alpha1.ReasonAccepted {
		t.Fatalf("no Accepted wakeup behind the 202: %v %+v", err, rec.Spec)
	}
	<-p.started // the reconcile runs after the answer
	close(p.gate)
	waitFor(t, "the record removed after the reconcile", func() bool {
		return apierrors.IsNotFound(h.env.Client.Get(t.Context(), wk, &v1alpha1.Wakeup{}))
	})
}
