package serverless_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

const cleanup = "test.opzero.dev/cleanup"

// finalizing is a kubebuilder-style reconciler with a finalizer: while the
// Widget is being deleted it removes its finalizer; otherwise it writes
// status.observedGeneration. It records what each reconcile's Get saw.
type finalizing struct {
	c    client.Client
	mu   sync.Mutex
	saw  []string // per reconcile: "gone", or the resourceVersion it read
	errs []error
}

func (r *finalizing) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	w := newWidget("", "")
	err := r.c.Get(ctx, req.NamespacedName, w)
	r.mu.Lock()
	if apierrors.IsNotFound(err) {
		r.saw = append(r.saw, "gone")
	} else {
		r.saw = append(r.saw, w.GetResourceVersion())
	}
	r.mu.Unlock()
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if w.GetDeletionTimestamp() != nil {
		if controllerutil.RemoveFinalizer(w, cleanup) {
			err = r.c.Update(ctx, w)
		}
	} else {
		_ = unstructured.SetNestedField(w.Object, w.GetGeneration(), "status", "observedGeneration")
		err = r.c.Status().Update(ctx, w)
	}
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
	return reconcile.Result{}, err
}

func (r *finalizing) seen() ([]string, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.saw...), append([]error(nil), r.errs...)
}

// finalizingHarness runs the finalizing reconciler, with send: post an
// event that must be answered 200.
func finalizingHarness(t *testing.T) (*finalizing, *harness, func(what string, ev *event.Event)) {
	r := &finalizing{}
	h := newHarness(t, r, nil, serverless.Options{})
	r.c = h.client
	return r, h, func(what string, ev *event.Event) {
		t.Helper()
		if a := h.post(ev, false); a.code != http.StatusOK {
			t.Fatalf("%s: answered %d %q (%s)", what, a.code, a.body, a.result)
		}
	}
}

// TestNoStandInFromBeforeASeenDeletion: once an instance has seen a key
// deleted (its delete event, or a reconcile's read that found it gone, as
// a fresh instance woken by a ping does), an update delivered afterwards
// whose object predates the deletion (finalizer still on, a version the
// instance never saw) does not stand in for the reconcile's Get: the
// reconcile reads the API server, sees the object gone, and the event is
// answered 200 with no failed write. Then a new Widget of the same name is
// reconciled as itself.
func TestNoStandInFromBeforeASeenDeletion(t *testing.T) {
	for _, how := range []string{"delete event", "read by a fresh instance"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			r, h, send := finalizingHarness(t)
			update := func(obj *unstructured.Unstructured) *event.Event {
				return h.event(cloudevent.Resource, cloudevent.Update, obj, "widgets")
			}

			w := newWidget(h.ns, "doomed")
			w.SetFinalizers([]string{cleanup})
			h.create(w)
			send("the creation", h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"))

			// Another writer changes the spec; its event is delayed until
			// after the deletion.
			late := w.DeepCopy()
			if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(w), late); err != nil {
				t.Fatal(err)
			}
			_ = unstructured.SetNestedField(late.Object, int64(2), "spec", "size")
			if err := h.env.Client.Update(ctx, late); err != nil {
				t.Fatal(err)
			}

			// The user deletes the Widget; the update that marks it goes
			// out and the reconciler removes the finalizer: it is gone.
			if err := h.env.Client.Delete(ctx, w); err != nil {
				t.Fatal(err)
			}
			deleting := newWidget("", "")
			if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(w), deleting); err != nil {
				t.Fatal(err)
			}
			send("the deletion's update", update(deleting))
			if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(w), newWidget("", "")); !apierrors.IsNotFound(err) {
				t.Fatalf("the Widget after its finalizer was removed: %v, want not found", err)
			}

			switch how {
			case "delete event":
				send("the delete event", h.event(cloudevent.Resource, cloudevent.Delete, deleting, "widgets"))
			default: // scaled to zero; a fresh instance is woken by a ping for the key
				h.engine = mustEngine(t, h, serverless.Options{})
				ping, _ := json.Marshal(map[string]string{"namespace": h.ns, "name": w.GetName()})
				send("the ping", cloudevent.NewPing("test/ping", ping))
			}
			before, _ := r.seen()
			if before[len(before)-1] != "gone" {
				t.Fatalf("the reconcile after the deletion saw %s, want gone", before[len(before)-1])
			}

			send("the delayed update from before the deletion", update(late))
			saw, errs := r.seen()
			if len(saw) != len(before)+1 || saw[len(saw)-1] != "gone" {
				t.Errorf("the delayed update's reconcile saw %v (all reconciles: %v), want gone: its stale object stood in", saw[len(before):], saw)
			}
			if len(errs) > 0 {
				t.Errorf("failed writes: %v", errs)
			}

			// A new Widget of that name is not taken for the gone one.
			again := newWidget(h.ns, "doomed")
			h.create(again)
			send("the new Widget's creation", h.event(cloudevent.Resource, cloudevent.Add, again, "widgets"))
			saw, errs = r.seen()
			if got := saw[len(saw)-1]; got != again.GetResourceVersion() {
				t.Errorf("the new Widget's reconcile saw %s, want its version %s", got, again.GetResourceVersion())
			}
			if len(errs) > 0 {
				t.Errorf("failed writes: %v", errs)
			}
			got := newWidget("", "")
			if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(again), got); err != nil {
				t.Fatal(err)
			}
			if og, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration"); og != 1 {
				t.Errorf("the new Widget's observedGeneration %d, want 1: %s", og, fmt.Sprint(got.Object["status"]))
			}
		})
	}
}

// TestReplayNeverStandsIn: a fresh instance (scaled to zero and started
// again: it has seen nothing of the key) gets a change the hub replays
// after a hand-off or its own restart (extension opzeroreplay "true"):
// the Widget's version from before its deletion, finalizer on, delivered
// after the deletion was reconciled and the Widget is gone. Its object
// does not stand in: the reconcile reads the API server and sees the
// Widget gone, answered 200, no write. Without the mark nothing in a fresh
// instance could tell the copy is stale (it would act on a deleted
// object: re-create its children). A replay of the Widget as it is still
// reconciles it, its own read answering.
func TestReplayNeverStandsIn(t *testing.T) {
	ctx := context.Background()
	r, h, send := finalizingHarness(t)
	replayed := func(obj *unstructured.Unstructured) *event.Event {
		ev := h.event(cloudevent.Resource, cloudevent.Update, obj, "widgets")
		ev.SetExtension(cloudevent.ReplayExtension, "true")
		return ev
	}

	w := newWidget(h.ns, "replayed")
	w.SetFinalizers([]string{cleanup})
	h.create(w)
	send("the creation", h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"))
	before := newWidget("", "")
	if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(w), before); err != nil {
		t.Fatal(err)
	}
	if err := h.env.Client.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	deleting := newWidget("", "")
	if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(w), deleting); err != nil {
		t.Fatal(err)
	}
	send("the deletion's update", h.event(cloudevent.Resource, cloudevent.Update, deleting, "widgets"))
	if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(w), newWidget("", "")); !apierrors.IsNotFound(err) {
		t.Fatalf("the Widget after its finalizer was removed: %v, want not found", err)
	}

	h.engine = mustEngine(t, h, serverless.Options{}) // scaled to zero, started again
	n := len(first(r.seen()))
	send("the replayed update from before the deletion", replayed(before))
	saw, errs := r.seen()
	if len(saw) != n+1 || saw[n] != "gone" {
		t.Errorf("the replayed update's reconciles saw %v, want one that saw the Widget gone: its stale object stood in (all: %v)", saw[n:], saw)
	}
	if len(errs) > 0 {
		t.Errorf("failed writes: %v", errs)
	}

	// A replay of a live Widget's current version is reconciled.
	again := newWidget(h.ns, "replayed")
	h.create(again)
	h.engine = mustEngine(t, h, serverless.Options{})
	send("a replay of the new Widget", replayed(again))
	saw, errs = r.seen()
	if got := saw[len(saw)-1]; got != again.GetResourceVersion() {
		t.Errorf("the replay of the new Widget: its reconcile saw %s, want %s", got, again.GetResourceVersion())
	}
	if len(errs) > 0 {
		t.Errorf("failed writes: %v", errs)
	}
}

func first[A, B any](a A, _ B) A { return a }
