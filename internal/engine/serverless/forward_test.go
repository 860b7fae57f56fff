package serverless_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/auth"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/telemetry"
)

// lockerCalls counts the requests a Locker's client makes to Leases: all,
// and the writes.
type lockerCalls struct {
	next        http.RoundTripper
	all, writes atomic.Int64
}

func (c *lockerCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.Contains(r.URL.Path, "/leases") {
		return c.next.RoundTrip(r) // discovery
	}
	c.all.Add(1)
	if r.Method != http.MethodGet {
		c.writes.Add(1)
	}
	return c.next.RoundTrip(r)
}

// lockerAt is newLocker for an instance that takes forwarded events at address.
func lockerAt(t *testing.T, h *harness, id, address string) (*lease.Locker, *lockerCalls) {
	t.Helper()
	calls := &lockerCalls{}
	cfg := rest.CopyConfig(h.env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { calls.next = rt; return calls }
	c, err := client.New(cfg, client.Options{Scheme: h.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lease.New(c, lease.Options{Operator: "widgets", Identity: id, Duration: 5 * time.Second, Namespace: h.ns, Address: address})
	if err != nil {
		t.Fatal(err)
	}
	return l, calls
}

// peer is one instance of the operator: an engine with its own Locker,
// served at the address it records on its Leases.
type peer struct {
	*serverless.Engine
	url   string
	calls *lockerCalls
}

func newPeer(t *testing.T, h *harness, id string, wrap func(http.Handler) http.Handler) *peer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{url: "http://" + l.Addr().String()}
	var locker *lease.Locker
	locker, p.calls = lockerAt(t, h, id, p.url)
	p.Engine = mustEngine(t, h, serverless.Options{Locker: locker, LeaseKeepIdle: 3 * time.Second})
	var hd http.Handler = p.Engine
	if wrap != nil {
		hd = wrap(hd)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: hd}}
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// send posts key name's update event to url with the given Authorization.
func (h *harness) sendTo(url, name, authz string, header ...string) answer {
	h.t.Helper()
	r, err := cloudevent.NewRequest(context.Background(), url, h.event(cloudevent.Reference, cloudevent.Update, newWidget(h.ns, name), "widgets"), false)
	if err != nil {
		h.t.Fatal(err)
	}
	if authz != "" {
		r.Header.Set("Authorization", authz)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return h.do(r)
}

func (h *harness) lease(name string) *coordinationv1.Lease {
	h.t.Helper()
	le := &coordinationv1.Lease{}
	if err := h.env.Client.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: lease.Name("widgets", req(h.ns, name).NamespacedName)}, le); err != nil {
		h.t.Fatal(err)
	}
	return le
}

// TestForwardToTheHolder: an event for a key whose Lease another instance
// keeps is sent to that instance, which reconciles it in a run that starts
// after it was sent, and the answer says so. The forwarder writes no Lease:
// the first such event costs it the create the API server refuses (409)
// and a read; the following ones no API call at all. Nothing is marked, so
// the holder never reruns.
func TestForwardToTheHolder(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	a, b := newPeer(t, h, "a", nil), newPeer(t, h, "b", nil)
	forwards := forwardCounter(h, "forwarded")
	k := req(h.ns, "k")
	if r := h.sendTo(a.url, "k", ""); r.code != 200 || !strings.Contains(r.result, "reconciled") {
		t.Fatalf("event to a: %d %q %q", r.code, r.result, r.body)
	}
	if le := h.lease("k"); le.Annotations[lease.AddressAnnotation] != a.url || ptrOr(le.Spec.HolderIdentity) != "a" {
		t.Fatalf("a's Lease: holder %q, address %q; want a at %s", ptrOr(le.Spec.HolderIdentity), le.Annotations[lease.AddressAnnotation], a.url)
	}
	for i := range 6 {
		r := h.sendTo(b.url, "k", "")
		if r.code != 200 || !strings.Contains(r.result, "reconciled") {
			t.Fatalf("event %d to b: %d %q %q, want 200 reconciled (by a)", i, r.code, r.result, r.body)
		}
		if !coveredBy(r, p.spansOf(k)) {
			t.Fatalf("event %d to b was answered without a reconcile that started after it", i)
		}
		if i == 0 && (b.calls.writes.Load() != 1 || b.calls.all.Load() != 2) {
			t.Fatalf("b's first forwarded event: %d Lease writes, %d calls; want the refused create and one read", b.calls.writes.Load(), b.calls.all.Load())
		}
	}
	if b.calls.all.Load() != 2 {
		t.Fatalf("b made %d Lease calls for 6 forwarded events, want 2 (the first event's)", b.calls.all.Load())
	}
	if got := b.Stats().Forwarded.Load(); got != 6 {
		t.Fatalf("b forwarded %d events, want 6", got)
	}
	if got := forwards(); got != 6 {
		t.Fatalf(`opzero_forwarded_events_total{result="forwarded"} grew by %v, want 6`, got)
	}
	if b.Stats().Reconciles.Load() != 0 || a.Stats().Reconciles.Load() != 7 {
		t.Fatalf("reconciles: a %d, b %d; want 7 by a, none by b", a.Stats().Reconciles.Load(), b.Stats().Reconciles.Load())
	}
	le := h.lease("k")
	if le.Annotations[lease.DirtyAnnotation] != "" || a.Stats().Reruns.Load() != 0 || b.Stats().HandOffs.Load() != 0 {
		t.Fatalf("marked: %q, a reran %d times, b handed off %d; want no mark", le.Annotations[lease.DirtyAnnotation], a.Stats().Reruns.Load(), b.Stats().HandOffs.Load())
	}
	if p.overlaps.Load() != 0 {
		t.Fatalf("%d overlapping reconciles", p.overlaps.Load())
	}
}

// TestForwardFallsBackToTheMark: when the holder cannot take a forwarded
// event (it is gone, dies mid-request, is draining, or the address is
// another server's now), the event is handled as without forwarding: the
// Lease is marked and its holder reconciles again before letting go, so
// nothing is lost. The address is then not tried again for a while.
func TestForwardFallsBackToTheMark(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	b := newPeer(t, h, "b", nil)
	fallbacks := forwardCounter(h, "fallback")
	closed := httptest.NewServer(nil)
	closed.Close()
	cases := []struct {
		name    string
		address string
	}{
		{"refused", closed.URL},
		{"killed-mid-request", serve(t, func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack() // the connection dies before an answer, as with a SIGKILL
			c.Close()
		})},
		{"draining", serve(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(serverless.HolderHeader, "a")
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		})},
		{"not-an-instance", serve(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			la, _ := lockerAt(t, h, "a-"+c.name, c.address)
			held, err := la.Acquire(context.Background(), req(h.ns, c.name))
			if err != nil {
				t.Fatal(err)
			}
			r := h.sendTo(b.url, c.name, "")
			if r.code != 200 || !strings.Contains(r.result, "handed off") {
				t.Fatalf("event to b: %d %q %q, want 200 handed off", r.code, r.result, r.body)
			}
			if got := b.Stats().ForwardFailures.Load(); got != int64(i+1) {
				t.Fatalf("%d failed forwards, want %d", got, i+1)
			}
			if got := fallbacks(); got != float64(i+1) {
				t.Fatalf(`opzero_forwarded_events_total{result="fallback"} grew by %v, want %d`, got, i+1)
			}
			if h.lease(c.name).Annotations[lease.DirtyAnnotation] != "b" {
				t.Fatal("the Lease was not marked after the failed forward")
			}
			r = h.sendTo(b.url, c.name, "") // the address is not tried again
			if r.code != 200 || b.Stats().ForwardFailures.Load() != int64(i+1) {
				t.Fatalf("second event: %d %q, %d failed forwards; want 200 and no new attempt", r.code, r.result, b.Stats().ForwardFailures.Load())
			}
			if dirty, err := held.Release(context.Background()); !dirty || err != nil {
				t.Fatalf("holder's Release: dirty %v, %v; want dirty (it reconciles the event)", dirty, err)
			}
			if dirty, err := held.Release(context.Background()); dirty || err != nil {
				t.Fatal(dirty, err)
			}
		})
	}
	if p.calls.Load() != 0 {
		t.Fatalf("b reconciled %d times a key another instance held", p.calls.Load())
	}
}

// forwardCounter reads how much opzero_forwarded_events_total{result} of
// h's operator has grown since the call (the registry is the process's).
func forwardCounter(h *harness, result string) func() float64 {
	c := telemetry.Default().Forwards.WithLabelValues(h.op.Name, result)
	before := testutil.ToFloat64(c)
	return func() float64 { return testutil.ToFloat64(c) - before }
}

func serve(t *testing.T, f http.HandlerFunc) string {
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s.URL
}

// TestForwardedRequestIsAuthenticated: the holder checks a forwarded
// request's token as any delivery's; the forwarder sends the sender's own
// Authorization, so a token the holder refuses is not laundered by another
// instance (that instance falls back to the mark, its own decision). A
// forwarded request for another operator is refused with 421.
func TestForwardedRequestIsAuthenticated(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{})
	var seenByA atomic.Int64
	tokens := func(seen *atomic.Int64, good ...string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return auth.Middleware(auth.Options{Authenticator: auth.AuthenticatorFunc(func(_ context.Context, tok string) (*auth.Identity, error) {
				if seen != nil {
					seen.Add(1)
				}
				for _, g := range good {
					if tok == g {
						return &auth.Identity{Username: "system:serviceaccount:ns:source"}, nil
					}
				}
				return nil, &auth.Rejected{Reason: "unknown token"}
			})}, next)
		}
	}
	a := newPeer(t, h, "a", tokens(&seenByA, "good"))
	b := newPeer(t, h, "b", tokens(nil, "good", "only-b-accepts"))
	if r := h.sendTo(a.url, "k", "Bearer good"); r.code != 200 {
		t.Fatalf("event to a: %d %s", r.code, r.body)
	}
	before := p.calls.Load()
	if r := h.sendTo(a.url, "k", "Bearer bad", serverless.ForwardedByHeader, "widgets/b"); r.code != http.StatusUnauthorized {
		t.Fatalf("forwarded request with a bad token: %d %s, want 401", r.code, r.body)
	}
	if r := h.sendTo(a.url, "k", "", serverless.ForwardedByHeader, "widgets/b"); r.code != http.StatusUnauthorized {
		t.Fatalf("forwarded request without a token: %d %s, want 401", r.code, r.body)
	}
	if r := h.sendTo(a.url, "k", "Bearer good", serverless.ForwardedByHeader, "gadgets/b"); r.code != http.StatusMisdirectedRequest {
		t.Fatalf("forwarded request for another operator: %d %s, want 421", r.code, r.body)
	}
	if p.calls.Load() != before {
		t.Fatal("a refused request was reconciled")
	}

	seen := seenByA.Load()
	if r := h.sendTo(b.url, "k", "Bearer good"); r.code != 200 || b.Stats().Forwarded.Load() != 1 || a.Stats().Reconciles.Load() != 2 {
		t.Fatalf("good token through b: %d %q, forwarded %d, a reconciled %d; want 200 reconciled by a", r.code, r.result, b.Stats().Forwarded.Load(), a.Stats().Reconciles.Load())
	}
	if seenByA.Load() != seen+1 {
		t.Fatal("a did not check the forwarded request's token")
	}
	r := h.sendTo(b.url, "k", "Bearer only-b-accepts")
	if r.code != 200 || !strings.Contains(r.result, "handed off") || b.Stats().ForwardFailures.Load() != 1 {
		t.Fatalf("a token a refuses, through b: %d %q; want b's own decision (200 handed off, the mark) after a failed forward", r.code, r.result)
	}
	if a.Stats().Reconciles.Load() != 2 && a.Stats().Reconciles.Load() != 3 { // 3: a found the mark on release
		t.Fatalf("a reconciled %d times", a.Stats().Reconciles.Load())
	}
	if p.overlaps.Load() != 0 {
		t.Fatal("overlapping reconciles")
	}
}

func ptrOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestDefaultAdvertiseAddress: outside a pod, none; in one, the first
// non-loopback IPv4 address with the listen port.
func TestDefaultAdvertiseAddress(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if a := serverless.DefaultAdvertiseAddress(":8080"); a != "" {
		t.Fatalf("outside a pod: %q, want none", a)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	var ipv4 []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ipv4 = append(ipv4, n.IP.String())
		}
	}
	a := serverless.DefaultAdvertiseAddress(":8080")
	if len(ipv4) == 0 {
		if a != "" {
			t.Fatalf("no non-loopback IPv4 address here, yet %q", a)
		}
		return
	}
	if a != "http://"+ipv4[0]+":8080" {
		t.Fatalf("in a pod: %q, want http://%s:8080", a, ipv4[0])
	}
	if a := serverless.DefaultAdvertiseAddress("not an address"); a != "" {
		t.Fatalf("unparsable listen address: %q", a)
	}
}
