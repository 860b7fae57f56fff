package serverless_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// TestConflictAfterAStandInReadsTheAPIServer: with more than one instance,
// an event can carry a version this instance knows as the newest while
// another instance (here: another writer) has written the key since. The
// reconciler's first Get is answered from that event's object and its
// Update conflicts; the engine reconciles once more at once with every read
// going to the API server, as Reference mode would have read, and the
// event is answered 200 with the write done. A conflict after reads from
// the API server only, or a second conflict, is an ordinary failure.
func TestConflictAfterAStandInReadsTheAPIServer(t *testing.T) {
	r := &writer{}
	h := newHarness(t, r, nil, serverless.Options{})
	r.c = h.client
	created := newWidget(h.ns, "stale")
	h.create(created)
	if a := h.post(h.event(cloudevent.Resource, cloudevent.Add, created, "widgets"), false); a.code != http.StatusOK {
		t.Fatalf("the creation: answered %d %s", a.code, a.body)
	}
	r.mu.Lock()
	ours := r.written[0] // this instance's write: the newest version it knows
	r.mu.Unlock()
	other := ours.DeepCopy() // another instance writes the key after it
	_ = unstructured.SetNestedField(other.Object, int64(2), "spec", "size")
	if err := h.env.Client.Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}

	a := h.post(h.event(cloudevent.Resource, cloudevent.Update, ours, "widgets"), false)
	if a.code != http.StatusOK {
		t.Fatalf("the event of this instance's own write, after another's: answered %d %s", a.code, a.body)
	}
	r.mu.Lock()
	conflicts, writes := 0, len(r.written)
	for _, err := range r.errs {
		if apierrors.IsConflict(err) {
			conflicts++
		}
	}
	r.mu.Unlock()
	if conflicts != 1 || writes != 2 {
		t.Errorf("%d conflicts and %d writes, want 1 (the stand-in's) and 2 (the creation's, the API server's read's): %v", conflicts, writes, r.errs)
	}
	if n := h.engine.Stats().MemoryConflicts.Load(); n != 1 {
		t.Errorf("MemoryConflicts = %d, want 1", n)
	}
	got := newWidget("", "")
	if err := h.env.Client.Get(context.Background(), client.ObjectKeyFromObject(created), got); err != nil {
		t.Fatal(err)
	}
	size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size")
	if got.GetAnnotations()["test.opzero.dev/reconciled"] != "xx" || size != 2 {
		t.Errorf("annotation %q and size %d, want xx (both reconciles wrote) and 2 (the other writer's change kept)",
			got.GetAnnotations()["test.opzero.dev/reconciled"], size)
	}

	// A reconciler that always conflicts: one more try after a stand-in,
	// none after a read from the API server; both fail.
	for _, tc := range []struct {
		mode  cloudevent.Mode
		calls int64
	}{{cloudevent.Resource, 2}, {cloudevent.Reference, 1}} {
		p := newProbe()
		p.result = func(req reconcile.Request, _ int) (reconcile.Result, error) {
			return reconcile.Result{}, apierrors.NewConflict(schema.GroupResource{Group: "test.opzero.dev", Resource: "widgets"}, req.Name, errors.New("always"))
		}
		hp := newHarness(t, p, nil, serverless.Options{})
		w := newWidget(hp.ns, "always")
		hp.create(w)
		if a := hp.post(hp.event(tc.mode, cloudevent.Update, w, "widgets"), false); a.code != http.StatusInternalServerError {
			t.Errorf("%s mode, always conflicting: answered %d %s, want 500", tc.mode, a.code, a.body)
		}
		if n := p.calls.Load(); n != tc.calls {
			t.Errorf("%s mode, always conflicting: %d reconciles, want %d", tc.mode, n, tc.calls)
		}
	}
}
