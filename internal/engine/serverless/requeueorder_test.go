package serverless_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// flakyDurable is durable time whose Requeue fails while fail is set, as
// when the API server goes away between the reconcile and the record.
type flakyDurable struct {
	fail     atomic.Bool
	mu       sync.Mutex
	requeued map[reconcile.Request]int
}

func (d *flakyDurable) Requeue(_ context.Context, key reconcile.Request, _ time.Duration) error {
	if d.fail.Load() {
		return errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requeued[key]++
	return nil
}
func (d *flakyDurable) Failed(context.Context, reconcile.Request) (time.Duration, int, error) {
	return time.Second, 0, nil
}
func (d *flakyDurable) Succeeded(context.Context, reconcile.Request) error { return nil }
func (d *flakyDurable) Accept(context.Context, reconcile.Request, time.Duration) error {
	return nil
}
func (d *flakyDurable) Overdue(context.Context) ([]reconcile.Request, error) { return nil, nil }

// TestRequeueRecordedBeforeObservedGeneration: with automatic
// observedGeneration and durable time, a RequeueAfter that cannot be
// recorded leaves the generation unobserved (the event is answered 503),
// so the anti-entropy sweep reconciles the object again and the requeue is
// recorded then. Written the other way round, the generation would look
// handled, the sweep would pass the object by, and the RequeueAfter would
// be lost (the fault soak's SIGKILL between the two writes does the same).
func TestRequeueRecordedBeforeObservedGeneration(t *testing.T) {
	p := newProbe()
	p.result = func(reconcile.Request, int) (reconcile.Result, error) {
		return reconcile.Result{RequeueAfter: time.Hour}, nil
	}
	d := &flakyDurable{requeued: map[reconcile.Request]int{}}
	d.fail.Store(true)
	h := newHarness(t, p, func(b *builder.Builder) *builder.Builder { return b.WithAutoObservedGeneration() }, serverless.Options{Durable: d})
	w := newWidget(h.ns, "later")
	h.create(w)
	if a := h.post(h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false); a.code != 503 {
		t.Fatalf("the requeue could not be recorded: %d %s, want 503", a.code, a.body)
	}
	got := newWidget(h.ns, "later")
	if err := h.env.Client.Get(t.Context(), client.ObjectKeyFromObject(w), got); err != nil {
		t.Fatal(err)
	}
	if og, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration"); og == got.GetGeneration() {
		t.Fatalf("status.observedGeneration = %d written although the requeue was not recorded: the sweep would pass the object by", og)
	}
	d.fail.Store(false)
	if a := h.post(cloudevent.NewPing("/apis/v1/namespaces/"+h.ns+"/pingsources/sweep", nil), false); a.code != 200 {
		t.Fatalf("sweep: %d %s", a.code, a.body)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := d.requeued[req(h.ns, "later")]; n != 1 {
		t.Fatalf("requeues of the object recorded after the sweep: %d, want 1 (the RequeueAfter was lost)", n)
	}
}
