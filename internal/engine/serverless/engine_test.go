package serverless_test

import (
	"context"
	"encoding/json"
	"github.com/opzero/opzero/internal/testkit"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestBurstForOneKeyCoalesces: 200 events for one key while its reconcile
// runs fold into at most 2 more reconciles, never overlapping, and every
// request is answered only after a reconcile that started after it was sent.
func TestBurstForOneKeyCoalesces(t *testing.T) {
	p := newProbe()
	p.started = make(chan reconcile.Request, 1000)
	p.gate = make(chan struct{})
	h := newHarness(t, p, nil, serverless.Options{})
	w := newWidget(h.ns, "burst")
	h.create(w)
	ev := func() answer { return h.post(h.event(cloudevent.Resource, cloudevent.Update, w, "widgets"), false) }

	answers := make([]answer, 201)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); answers[0] = ev() }()
	<-p.started // the first reconcile is running (and held)
	for i := 1; i <= 200; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); answers[i] = ev() }(i)
	}
	// Let the first reconcile go once every request has been queued.
	if !testkit.Wait(30*time.Second, func() bool { return h.engine.Stats().Submitted.Load() >= 201 }) {
		t.Fatalf("only %d of 201 requests were queued", h.engine.Stats().Submitted.Load())
	}
	close(p.gate)
	wg.Wait()

	k := req(h.ns, "burst")
	spans := p.spansOf(k)
	if len(spans) < 2 || len(spans) > 3 {
		t.Fatalf("%d reconciles for 201 events (one held while 200 arrived), want 2 or 3", len(spans))
	}
	if o := p.overlaps.Load(); o != 0 {
		t.Fatalf("%d overlapping reconciles of one key", o)
	}
	for i, a := range answers {
		if a.code != http.StatusOK {
			t.Fatalf("answer %d: %d %s", i, a.code, a.body)
		}
		if !coveredBy(a, spans) {
			t.Fatalf("answer %d (sent %s, answered %s) not preceded by a reconcile that started after it was sent: %v",
				i, a.sent.Format(time.StampMicro), a.done.Format(time.StampMicro), spans)
		}
	}
}

// coveredBy: some reconcile started after a was sent and ended before a was answered.
func coveredBy(a answer, spans []span) bool {
	for _, s := range spans {
		if s.start.After(a.sent) && !s.end.After(a.done) {
			return true
		}
	}
	return false
}

// TestStatusOnlyUpdatesAreSkipped: updates whose generation is already
// observed cost no reconcile and no API call; a spec change, a deletion and
// a finalizer change are still reconciled.
func TestStatusOnlyUpdatesAreSkipped(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	w := newWidget(h.ns, "quiet")
	h.create(w)
	_ = unstructured.SetNestedField(w.Object, w.GetGeneration(), "status", "observedGeneration")
	if err := h.env.Client.Status().Update(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	if a := h.post(h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false); a.code != 200 {
		t.Fatalf("add: %d %s", a.code, a.body)
	}
	reconciles, calls := p.calls.Load(), h.api.calls.Load()
	for i := 0; i < 100; i++ {
		_ = unstructured.SetNestedField(w.Object, int64(i), "status", "other")
		a := h.post(h.event(cloudevent.Resource, cloudevent.Update, w, "widgets"), i%2 == 0)
		if a.code != 200 || !strings.HasPrefix(a.result, "skipped") {
			t.Fatalf("status-only update %d: %d %q %s, want 200 skipped", i, a.code, a.result, a.body)
		}
	}
	if d := p.calls.Load() - reconciles; d != 0 {
		t.Fatalf("%d reconciles for status-only updates, want 0", d)
	}
	if d := h.api.calls.Load() - calls; d != 0 {
		t.Fatalf("%d API calls for status-only updates, want 0", d)
	}
	if s := h.engine.Stats().Skipped.Load(); s != 100 {
		t.Fatalf("Stats().Skipped = %d, want 100", s)
	}

	mutations := map[string]func(u *unstructured.Unstructured){
		"spec change":      func(u *unstructured.Unstructured) { u.SetGeneration(u.GetGeneration() + 1) },
		"deletion":         func(u *unstructured.Unstructured) { now := metav1.Now(); u.SetDeletionTimestamp(&now) },
		"finalizer change": func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"example.com/cleanup"}) },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			before := p.calls.Load()
			u := w.DeepCopy()
			mutate(u)
			a := h.post(h.event(cloudevent.Resource, cloudevent.Update, u, "widgets"), false)
			if a.code != 200 || p.calls.Load() != before+1 {
				t.Fatalf("%s: %d %q, %d reconciles; want 200 and 1 reconcile", name, a.code, a.result, p.calls.Load()-before)
			}
		})
	}
}

// TestRoutesOwnedAndWatchedKinds: a dependent reaches its controller owner in
// Resource and Reference mode; a watched kind goes through its map function.
func TestRoutesOwnedAndWatchedKinds(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, func(b *builder.Builder) *builder.Builder {
		return b.Owns(&corev1.ConfigMap{}).Watches(&corev1.Secret{}, mapSecretByLabel)
	}, serverless.Options{})
	w := newWidget(h.ns, "owner")
	h.create(w)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dep", Namespace: h.ns, OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "test.opzero.dev/v1", Kind: "Widget", Name: "owner", UID: w.GetUID(), Controller: ptrTrue(),
	}}}}
	h.create(cm)
	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Namespace: h.ns}}
	h.create(orphan)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: h.ns, Labels: map[string]string{"widget": "owner"}}}
	h.create(sec)

	cases := []struct {
		name   string
		mode   cloudevent.Mode
		obj    interface{ GetName() string }
		ev     func() answer
		wantRC int64
	}{
		{"owned, Resource mode", cloudevent.Resource, cm, func() answer { return h.post(h.event(cloudevent.Resource, cloudevent.Update, cm, "configmaps"), false) }, 1},
		{"owned, Reference mode", cloudevent.Reference, cm, func() answer {
			return h.post(h.event(cloudevent.Reference, cloudevent.Update, cm, "configmaps"), false)
		}, 1},
		{"no owner", cloudevent.Resource, orphan, func() answer {
			return h.post(h.event(cloudevent.Resource, cloudevent.Update, orphan, "configmaps"), false)
		}, 0},
		{"watched, Resource mode", cloudevent.Resource, sec, func() answer { return h.post(h.event(cloudevent.Resource, cloudevent.Add, sec, "secrets"), false) }, 1},
		{"watched, Reference mode", cloudevent.Reference, sec, func() answer { return h.post(h.event(cloudevent.Reference, cloudevent.Add, sec, "secrets"), true) }, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(p.spansOf(req(h.ns, "owner")))
			a := tc.ev()
			if a.code != 200 {
				t.Fatalf("%d %s", a.code, a.body)
			}
			if got := int64(len(p.spansOf(req(h.ns, "owner"))) - before); got != tc.wantRC {
				t.Fatalf("%d reconciles of the owner, want %d (result %q)", got, tc.wantRC, a.result)
			}
		})
	}
}

// TestPingSweepsEveryPrimary: a PingSource tick without data reconciles
// every object of the primary kind; with a key, only that one.
func TestPingSweepsEveryPrimary(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	for _, n := range []string{"a", "b", "c"} {
		h.create(newWidget(h.ns, n))
	}
	if a := h.post(cloudevent.NewPing("/apis/v1/namespaces/x/pingsources/sweep", nil), false); a.code != 200 {
		t.Fatalf("sweep: %d %s", a.code, a.body)
	}
	for _, n := range []string{"a", "b", "c"} {
		if len(p.spansOf(req(h.ns, n))) != 1 {
			t.Fatalf("widget %s reconciled %d times by the sweep, want 1", n, len(p.spansOf(req(h.ns, n))))
		}
	}
	a := h.post(cloudevent.NewPing("/apis/v1/namespaces/x/pingsources/one", []byte(`{"namespace":"`+h.ns+`","name":"b"}`)), false)
	if a.code != 200 || len(p.spansOf(req(h.ns, "b"))) != 2 || len(p.spansOf(req(h.ns, "a"))) != 1 {
		t.Fatalf("ping for one key: %d %s; reconciles a=%d b=%d, want a=1 b=2", a.code, a.body, len(p.spansOf(req(h.ns, "a"))), len(p.spansOf(req(h.ns, "b"))))
	}
}

func ptrTrue() *bool { b := true; return &b }

// mapSecretByLabel maps a Secret to the Widget its "widget" label names.
func mapSecretByLabel(ctx context.Context, c client.Reader, obj client.Object) ([]reconcile.Request, error) {
	if obj.GetLabels() == nil { // Reference mode: read the labels
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), s); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		obj = s
	}
	if n := obj.GetLabels()["widget"]; n != "" {
		return []reconcile.Request{req(obj.GetNamespace(), n)}, nil
	}
	return nil, nil
}

// TestAutoObservedGeneration: with the option, a successful reconcile
// writes status.observedGeneration = the generation the reconciler read.
func TestAutoObservedGeneration(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, func(b *builder.Builder) *builder.Builder { return b.WithAutoObservedGeneration() }, serverless.Options{})
	w := newWidget(h.ns, "auto")
	h.create(w)
	if a := h.post(h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	got := newWidget(h.ns, "auto")
	if err := h.env.Client.Get(t.Context(), client.ObjectKeyFromObject(w), got); err != nil {
		t.Fatal(err)
	}
	if og, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration"); og != w.GetGeneration() {
		t.Fatalf("status.observedGeneration = %d after a successful reconcile, want %d", og, w.GetGeneration())
	}
}

// TestLabelChangesOptIn: by default a label change at an observed generation
// is skipped; with OnLabelChange it is reconciled.
func TestLabelChangesOptIn(t *testing.T) {
	for _, opt := range []bool{false, true} {
		p := newProbe()
		h := newHarness(t, p, func(b *builder.Builder) *builder.Builder {
			return b.WithSkipOptions(builder.SkipOptions{OnLabelChange: opt})
		}, serverless.Options{})
		w := newWidget(h.ns, "labels")
		_ = unstructured.SetNestedField(w.Object, int64(1), "status", "observedGeneration")
		w.SetGeneration(1)
		h.post(h.event(cloudevent.Resource, cloudevent.Update, w, "widgets"), false) // first sight: reconciled
		before := p.calls.Load()
		w.SetLabels(map[string]string{"tier": "gold"})
		h.post(h.event(cloudevent.Resource, cloudevent.Update, w, "widgets"), false)
		want := int64(0)
		if opt {
			want = 1
		}
		if got := p.calls.Load() - before; got != want {
			t.Fatalf("OnLabelChange=%v: %d reconciles for a label change, want %d", opt, got, want)
		}
	}
}

// TestAntiEntropySweep: a ping without data reconciles only what needs it
// (generation not observed, deletion pending with finalizers); a ping with
// {"sweep":"all"} reconciles everything.
func TestAntiEntropySweep(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	ctx := t.Context()
	mk := func(name string, observed bool, finalizer bool) {
		w := newWidget(h.ns, name)
		if finalizer {
			w.SetFinalizers([]string{"test.opzero.dev/hold"})
		}
		h.create(w)
		if observed {
			_ = unstructured.SetNestedField(w.Object, w.GetGeneration(), "status", "observedGeneration")
			if err := h.env.Client.Status().Update(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		if finalizer {
			if err := h.env.Client.Delete(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("synced", true, false)
	mk("behind", false, false)
	mk("deleting", true, true)
	t.Cleanup(func() {
		w := newWidget(h.ns, "deleting")
		_ = h.env.Client.Patch(context.Background(), w, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if a := h.post(cloudevent.NewPing("/apis/v1/namespaces/x/pingsources/sweep", nil), false); a.code != 200 {
		t.Fatalf("sweep: %d %s", a.code, a.body)
	}
	for name, want := range map[string]int{"synced": 0, "behind": 1, "deleting": 1} {
		if got := len(p.spansOf(req(h.ns, name))); got != want {
			t.Errorf("sweep reconciled %s %d times, want %d", name, got, want)
		}
	}
	if a := h.post(cloudevent.NewPing("/apis/v1/namespaces/x/pingsources/all", []byte(`{"sweep":"all"}`)), false); a.code != 200 {
		t.Fatalf("full sweep: %d %s", a.code, a.body)
	}
	for name, want := range map[string]int{"synced": 1, "behind": 2, "deleting": 2} {
		if got := len(p.spansOf(req(h.ns, name))); got != want {
			t.Errorf("after the full sweep %s was reconciled %d times, want %d", name, got, want)
		}
	}
}

// TestHubReferenceDeletesCarryMetadata: a Reference-mode delete from the
// opzero hub carries the metadata its watch last saw: an owned child
// deleted by hand reconciles its owner, and a label-mapped watched object
// deleted reconciles what its labels name, with no read (the objects are
// gone). Knative's reference alone still maps nothing for an owned delete.
func TestHubReferenceDeletesCarryMetadata(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, func(b *builder.Builder) *builder.Builder {
		return b.Owns(&corev1.ConfigMap{}).Watches(&corev1.Secret{}, mapSecretByLabel)
	}, serverless.Options{})
	w := newWidget(h.ns, "owner")
	h.create(w)
	withMeta := func(ev *event.Event, meta cloudevent.RefMeta) *event.Event {
		var ref map[string]any
		if err := json.Unmarshal(ev.Data(), &ref); err != nil {
			t.Fatal(err)
		}
		ref["metadata"] = meta
		if err := ev.SetData(event.ApplicationJSON, ref); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	gone := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deleted-child", Namespace: h.ns}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "deleted-secret", Namespace: h.ns}}
	for _, tc := range []struct {
		name   string
		ev     *event.Event
		wantRC int
	}{
		{"owned child deleted, the hub's metadata", withMeta(h.event(cloudevent.Reference, cloudevent.Delete, gone, "configmaps"), cloudevent.RefMeta{
			OwnerReferences: []cloudevent.RefOwner{{APIVersion: "test.opzero.dev/v1", Kind: "Widget", Name: "owner", UID: string(w.GetUID()), Controller: ptrTrue()}}}), 1},
		{"watched object deleted, its labels", withMeta(h.event(cloudevent.Reference, cloudevent.Delete, secret, "secrets"), cloudevent.RefMeta{
			Labels: map[string]string{"widget": "owner"}}), 1},
		{"owned child deleted, a reference alone", h.event(cloudevent.Reference, cloudevent.Delete, gone, "configmaps"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(p.spansOf(req(h.ns, "owner")))
			a := h.post(tc.ev, false)
			if a.code != 200 {
				t.Fatalf("%d %s", a.code, a.body)
			}
			if got := len(p.spansOf(req(h.ns, "owner"))) - before; got != tc.wantRC {
				t.Fatalf("%d reconciles of the owner, want %d (result %q)", got, tc.wantRC, a.result)
			}
		})
	}
}
