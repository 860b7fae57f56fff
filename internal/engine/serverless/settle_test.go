package serverless_test

import (
	"github.com/opzero/opzero/internal/testkit"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestBurstOutlastingAReconcileCostsOneFollowUp: events that keep arriving
// after a reconcile ended join its held follow-up (FollowUpSettle), so the
// burst costs two reconciles, and every request is answered 200 only after
// the follow-up, which started after it arrived, has finished.
func TestBurstOutlastingAReconcileCostsOneFollowUp(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 10)
	p.gate = make(chan struct{})
	// A wide window: a loaded machine must not pause the burst for that long.
	h := newHarness(t, p, nil, serverless.Options{FollowUpSettle: 300 * time.Millisecond, FollowUpMaxSettle: time.Minute})
	ev := h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, "burst"), "widgets")
	answers := make(chan answer, 20)
	send := func() { go func() { answers <- h.post(ev, false) }() }
	send()
	<-p.started // reconcile 1 runs and waits
	for i := 0; i < 3; i++ {
		send() // during reconcile 1
	}
	if !testkit.Wait(10*time.Second, func() bool { return h.engine.Stats().Submitted.Load() >= 4 }) {
		t.Fatalf("only %d of the 4 events reached the queue", h.engine.Stats().Submitted.Load())
	}
	p.gate <- struct{}{} // reconcile 1 ends; the burst goes on
	var last time.Time
	for i := 0; i < 4; i++ {
		time.Sleep(20 * time.Millisecond)
		last = time.Now()
		send()
	}
	<-p.started
	if held := time.Since(last); held < 300*time.Millisecond {
		t.Fatalf("follow-up started %v after the last event, want the burst to pause 300ms first", held)
	}
	p.gate <- struct{}{}
	for i := 0; i < 8; i++ {
		if a := <-answers; a.code != http.StatusOK {
			t.Fatalf("answer %d %s, want 200", a.code, a.body)
		}
	}
	if n := p.calls.Load(); n != 2 {
		t.Fatalf("%d reconciles for the burst, want 2", n)
	}
}
