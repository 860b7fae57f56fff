package serverless_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/testkit"
)

// newSoleLocker is newLockerFor with lease.Options.Sole: instances may
// run alone.
func newSoleLocker(t *testing.T, h *harness, id string, d time.Duration) (*lease.Locker, *leaseWrites) {
	t.Helper()
	w := &leaseWrites{}
	cfg := rest.CopyConfig(h.env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { w.next = rt; return w }
	c, err := client.New(cfg, client.Options{Scheme: h.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lease.New(c, lease.Options{Operator: "widgets", Identity: id, Duration: d, Namespace: h.ns, Sole: true})
	if err != nil {
		t.Fatal(err)
	}
	return l, w
}

// TestAloneOneLeaseForManyKeys: with a Locker whose instances may run
// alone, 20 keys reconciled by one instance cost the sole Lease's create
// and, once idle, its delete: no per-key Lease.
func TestAloneOneLeaseForManyKeys(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	l, w := newSoleLocker(t, h, "a", 30*time.Second) // renewed every 10 s: released (idle 5 s) before
	h.engine = mustEngine(t, h, serverless.Options{Locker: l})
	for i := range 20 {
		name := "w" + string(rune('a'+i))
		if a := h.post(cloudevent.NewPing("/apis/v1/namespaces/"+h.ns+"/pingsources/p", []byte(`{"namespace":"`+h.ns+`","name":"`+name+`"}`)), false); a.code != http.StatusOK {
			t.Fatalf("ping %s: %d %s", name, a.code, a.body)
		}
	}
	if n := w.n.Load(); n != 1 {
		t.Fatalf("%d Lease writes for 20 keys, want 1 (the sole Lease's create)", n)
	}
	testkit.Eventually(t, 30*time.Second, "the sole Lease released once idle", func(context.Context) (bool, error) { return len(h.leases()) == 0, nil })
	if n := w.n.Load(); n != 2 {
		t.Fatalf("%d Lease writes in all, want 2", n)
	}
}

// TestEventCacheWhileAlone: with a Locker, the event cache serves only
// while this instance holds the sole Lease: what a Get read is served
// again (no API call) while alone; a new hub epoch (Opzero-Hub-Epoch)
// drops it; once another instance has asked for the sole Lease and this
// one stepped down, every read goes to the API server.
func TestEventCacheWhileAlone(t *testing.T) {
	r := &cmReader{}
	h := newHarness(t, r, func(b *builder.Builder) *builder.Builder {
		return b.Watches(&corev1.ConfigMap{}, func(context.Context, client.Reader, client.Object) ([]reconcile.Request, error) {
			return []reconcile.Request{req("x", "w")}, nil
		})
	}, serverless.Options{})
	r.c, r.ns = h.client, h.ns
	l, _ := newSoleLocker(t, h, "a", 3*time.Second)
	h.engine = mustEngine(t, h, serverless.Options{EventCache: true, Locker: l})
	h.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: h.ns}, Data: map[string]string{"v": "1"}})

	// ping reconciles x/w (which reads cm), with the epoch header if set;
	// it returns the API calls the engine made.
	ping := func(name, epoch string) int64 {
		t.Helper()
		before := h.api.calls.Load()
		req, err := cloudevent.NewRequest(context.Background(), h.srv.URL, cloudevent.NewPing("/apis/v1/namespaces/"+h.ns+"/pingsources/p", []byte(`{"namespace":"x","name":"w"}`)), false)
		if err != nil {
			t.Fatal(err)
		}
		if epoch != "" {
			req.Header.Set(serverless.HubEpochHeader, epoch)
		}
		if a := h.do(req); a.code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, a.code, a.body)
		}
		return h.api.calls.Load() - before
	}
	if n := ping("first", ""); n == 0 {
		t.Fatal("the first read answered without the API server")
	}
	if n := ping("alone", ""); n != 0 {
		t.Fatalf("alone, what a Get read: %d API calls, want 0", n)
	}
	if n := ping("first epoch", "e1"); n != 1 {
		t.Fatalf("a new epoch: %d API calls, want 1", n)
	}
	if n := ping("same epoch", "e1"); n != 0 {
		t.Fatalf("the same epoch: %d API calls, want 0", n)
	}
	if n := ping("another epoch", "e2"); n != 1 {
		t.Fatalf("another epoch: %d API calls, want 1", n)
	}

	other, _ := newSoleLocker(t, h, "b", 3*time.Second)
	var he *lease.HeldElsewhere
	if _, err := other.AcquireSole(context.Background()); !errors.As(err, &he) || he.Holder != "a" {
		t.Fatalf("another instance's AcquireSole: %v, want held by a", err)
	}
	testkit.Eventually(t, 10*time.Second, "the instance steps down", func(context.Context) (bool, error) {
		for _, le := range h.leases() {
			if le.Name == lease.SoleName("widgets") {
				return false, nil
			}
		}
		return true, nil
	})
	for i := range 2 {
		if n := ping("not alone", "e2"); n != 1 {
			t.Fatalf("not alone (%d): %d API calls, want 1", i, n)
		}
	}
}

// TestWarmTakesTheSoleLease: Warm, before any event, takes the sole Lease
// when nobody holds it: the first event then writes no Lease of its own.
// Another instance's Warm, finding it held, writes nothing (it does not
// ask the holder to step down) and does not run alone.
func TestWarmTakesTheSoleLease(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	l, w := newSoleLocker(t, h, "a", 30*time.Second)
	h.engine = mustEngine(t, h, serverless.Options{Locker: l})
	ctx := context.Background()
	if alone, err := h.engine.Warm(ctx); err != nil || !alone {
		t.Fatalf("Warm: alone %v, %v; want alone", alone, err)
	}
	if n := w.n.Load(); n != 1 {
		t.Fatalf("Warm: %d Lease writes, want 1 (the sole Lease's create)", n)
	}
	if a := h.post(cloudevent.NewPing("/apis/v1/namespaces/"+h.ns+"/pingsources/p", []byte(`{"namespace":"`+h.ns+`","name":"w"}`)), false); a.code != http.StatusOK {
		t.Fatalf("the first event: %d %s", a.code, a.body)
	}
	if n := w.n.Load(); n != 1 {
		t.Fatalf("the first event after Warm wrote %d Leases, want none", n-1)
	}

	lb, wb := newSoleLocker(t, h, "b", 30*time.Second)
	b := mustEngine(t, h, serverless.Options{Locker: lb})
	if alone, err := b.Warm(ctx); err != nil || alone {
		t.Fatalf("another instance's Warm: alone %v, %v; want not alone", alone, err)
	}
	if n := wb.n.Load(); n != 1 {
		t.Fatalf("another instance's Warm: %d Lease writes, want 1 (the refused create)", n)
	}
	for _, le := range h.leases() {
		if le.Annotations[lease.WantedAnnotation] != "" {
			t.Fatalf("another instance's Warm marked %s wanted", le.Name)
		}
	}
	testkit.Eventually(t, 30*time.Second, "the sole Lease released once idle", func(context.Context) (bool, error) { return len(h.leases()) == 0, nil })
}
