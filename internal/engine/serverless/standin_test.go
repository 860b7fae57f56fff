package serverless_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// writer is a kubebuilder-style reconciler: it reads its Widget, writes an
// annotation with an optimistic Update (the read's resourceVersion), and
// keeps what it wrote.
type writer struct {
	c       client.Client
	mu      sync.Mutex
	written []*unstructured.Unstructured
	errs    []error
}

func (r *writer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	w := newWidget("", "")
	if err := r.c.Get(ctx, req.NamespacedName, w); err != nil {
		return reconcile.Result{}, err
	}
	a := w.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a["test.opzero.dev/reconciled"] += "x"
	w.SetAnnotations(a)
	err := r.c.Update(ctx, w)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return reconcile.Result{}, err
	}
	r.written = append(r.written, w.DeepCopy())
	return reconcile.Result{}, nil
}

// TestLateEventsNeverStandInForNewerWrites: Knative's adapter delivers one
// event at a time, so the event of a version this instance already
// overwrote arrives after the write (here: the reconciler's Update, then the
// engine's observedGeneration). Its object must not answer the next
// reconcile's first Get: the Update would conflict. Nor must a redelivered
// older event. Every answer is 200 and no write conflicts.
func TestLateEventsNeverStandInForNewerWrites(t *testing.T) {
	r := &writer{}
	h := newHarness(t, r, func(b *builder.Builder) *builder.Builder { return b.WithAutoObservedGeneration() }, serverless.Options{})
	r.c = h.client
	created := newWidget(h.ns, "late")
	h.create(created)
	send := func(what string, action cloudevent.Action, obj *unstructured.Unstructured) {
		t.Helper()
		a := h.post(h.event(cloudevent.Resource, action, obj, "widgets"), false)
		if a.code != http.StatusOK {
			t.Fatalf("%s (resourceVersion %s): answered %d %s", what, obj.GetResourceVersion(), a.code, a.body)
		}
	}
	send("the creation", cloudevent.Add, created)
	r.mu.Lock()
	firstWrite := r.written[0] // older than the observedGeneration write after it
	r.mu.Unlock()
	send("the event of the reconciler's own Update, after the engine's later write", cloudevent.Update, firstWrite)
	send("a redelivery of the creation", cloudevent.Update, created)

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		if apierrors.IsConflict(err) {
			t.Errorf("the reconciler's Update conflicted: a stale event stood in for its Get: %v", err)
		}
	}
	if len(r.written) != 3 {
		t.Errorf("%d reconciles wrote, want 3 (%v)", len(r.written), r.errs)
	}
}
