package serverless_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// cmReader reads the ConfigMap "cm" on each reconcile, and writes its
// data["v"] when write is set.
type cmReader struct {
	c     client.Client
	ns    string
	mu    sync.Mutex
	read  []string // data["v"]@resourceVersion, or the error, per reconcile
	write string
}

func (r *cmReader) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	cm := &corev1.ConfigMap{}
	err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "cm"}, cm)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.read = append(r.read, err.Error())
		return reconcile.Result{}, nil
	}
	r.read = append(r.read, cm.Data["v"]+"@"+cm.ResourceVersion)
	if r.write != "" {
		cm.Data["v"], r.write = r.write, ""
		return reconcile.Result{}, r.c.Update(ctx, cm)
	}
	return reconcile.Result{}, nil
}

func (r *cmReader) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read[len(r.read)-1]
}

// TestEventCache: with Options.EventCache, a reconcile's Get of a watched
// object is answered from the newest object an event delivered or a Get
// read (no API call), and from the API server wherever the rules say the cache cannot
// know: after this instance wrote a newer version (even when a late event
// for an older one arrives), after a delete or a Reference-mode event,
// after an event was refused unread, and for objects neither an event
// carried nor a Get read.
func TestEventCache(t *testing.T) {
	r := &cmReader{}
	h := newHarness(t, r, func(b *builder.Builder) *builder.Builder {
		return b.Watches(&corev1.ConfigMap{}, func(context.Context, client.Reader, client.Object) ([]reconcile.Request, error) {
			return []reconcile.Request{req("x", "w")}, nil
		})
	}, serverless.Options{})
	r.c, r.ns = h.client, h.ns
	h.engine = mustEngine(t, h, serverless.Options{EventCache: true})
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: h.ns}, Data: map[string]string{"v": "1"}}
	h.create(cm)
	v1 := cm.DeepCopy()

	// step delivers ev (an event, or a ping when nil) and returns what the
	// reconcile read and how many API calls the engine made.
	step := func(name string, ev func() answer) (string, int64) {
		t.Helper()
		before := h.api.calls.Load()
		if a := ev(); a.code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, a.code, a.body)
		}
		return r.last(), h.api.calls.Load() - before
	}
	event := func(action cloudevent.Action, mode cloudevent.Mode, obj *corev1.ConfigMap) func() answer {
		return func() answer { return h.post(h.event(mode, action, obj, "configmaps"), false) }
	}
	ping := func() answer {
		return h.post(cloudevent.NewPing("/apis/v1/namespaces/"+h.ns+"/pingsources/p", []byte(`{"namespace":"x","name":"w"}`)), false)
	}
	want := func(name, got string, calls int64, wantV, wantRV string, wantCalls int64) {
		t.Helper()
		if got != wantV+"@"+wantRV || calls != wantCalls {
			t.Fatalf("%s: read %s with %d API calls, want %s@%s with %d", name, got, calls, wantV, wantRV, wantCalls)
		}
	}

	got, calls := step("before any event", ping)
	if got != "1@"+v1.ResourceVersion || calls == 0 { // the first call also looks up the REST mapping
		t.Fatalf("an object no event carried: read %s with %d API calls, want the API server to answer", got, calls)
	}
	got, calls = step("read again", ping)
	want("what a Get read is kept (no event of its kind arrived meanwhile)", got, calls, "1", v1.ResourceVersion, 0)
	got, calls = step("first sight", event(cloudevent.Add, cloudevent.Resource, cm))
	want("an event's object answers the Get", got, calls, "1", v1.ResourceVersion, 0)
	got, calls = step("again", ping)
	want("still the newest known", got, calls, "1", v1.ResourceVersion, 0)

	// Another writer changes it; its event arrives: the new version is served.
	cm.Data["v"] = "2"
	if err := h.env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	v2 := cm.DeepCopy()
	got, calls = step("the change's event", event(cloudevent.Update, cloudevent.Resource, v2))
	want("a newer event replaces it", got, calls, "2", v2.ResourceVersion, 0)

	// The reconciler writes v3; a late redelivery of v2 arrives before
	// v3's event: the cache cannot be trusted, the API server answers.
	r.mu.Lock()
	r.write = "3"
	r.mu.Unlock()
	step("the reconciler writes 3", ping)
	cur := &corev1.ConfigMap{}
	if err := h.env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cur); err != nil || cur.Data["v"] != "3" {
		t.Fatalf("the reconciler's write: %v %v", cur.Data, err)
	}
	got, calls = step("a late event for 2", event(cloudevent.Update, cloudevent.Resource, v2))
	want("after its own write, never the older version", got, calls, "3", cur.ResourceVersion, 1)
	got, calls = step("the write's event", event(cloudevent.Update, cloudevent.Resource, cur))
	want("the write's own event confirms it", got, calls, "3", cur.ResourceVersion, 0)
	got, calls = step("v2 redelivered again", event(cloudevent.Update, cloudevent.Resource, v2))
	want("a redelivery of a replaced version is ignored", got, calls, "3", cur.ResourceVersion, 0)

	// A Reference-mode event says it changed without carrying it.
	got, calls = step("a Reference-mode event", event(cloudevent.Update, cloudevent.Reference, cur))
	want("a change it does not carry", got, calls, "3", cur.ResourceVersion, 1)
	step("the object again", event(cloudevent.Update, cloudevent.Resource, cur))

	// A delete event: the API server answers (here it still has it).
	got, calls = step("a delete event", event(cloudevent.Delete, cloudevent.Resource, cur))
	want("after a delete event", got, calls, "3", cur.ResourceVersion, 1)
	step("the object again", event(cloudevent.Update, cloudevent.Resource, cur))

	// An event refused unread: anything may have changed.
	bad, _ := http.NewRequest(http.MethodPost, h.srv.URL, strings.NewReader("{"))
	bad.Header.Set("Content-Type", "application/cloudevents+json")
	if a := h.do(bad); a.code != http.StatusBadRequest {
		t.Fatalf("malformed event: %d, want 400", a.code)
	}
	got, calls = step("after a refused event", ping)
	want("after an event refused unread", got, calls, "3", cur.ResourceVersion, 1)
	got, calls = step("read again", ping)
	want("what that Get read is kept", got, calls, "3", cur.ResourceVersion, 0)
}
