package serverless_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

var errBoom = errors.New("boom: the reconcile's own failure")

// awayTransport sends every request to a closed port while away is set:
// the kernel refuses the connection, as when kube-apiserver is dead.
type awayTransport struct {
	next   http.RoundTripper
	away   atomic.Bool
	closed string // host:port nobody listens on
}

func (a *awayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if a.away.Load() {
		r = r.Clone(r.Context())
		r.URL.Host = a.closed
	}
	return a.next.RoundTrip(r)
}

// TestAPIServerAway: a reconcile that fails because the API server refuses
// connections is answered 503 with Retry-After (every Knative sender
// retries it; ApiServerSource would drop a 500), not marked handled; once
// the API server is back the same engine handles the event (200), without
// a restart. A reconcile that fails for its own reasons still gets 500.
func TestAPIServerAway(t *testing.T) {
	p := newProbe()
	var h *harness
	var own atomic.Bool
	p.result = func(reconcile.Request, int) (reconcile.Result, error) {
		if own.Load() {
			return reconcile.Result{}, errBoom
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(widgetGVK.GroupVersion().WithKind("WidgetList"))
		return reconcile.Result{}, h.client.List(context.Background(), list, client.InNamespace(h.ns))
	}
	h = newHarness(t, p, nil, serverless.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	at := &awayTransport{next: h.api.next, closed: l.Addr().String()}
	l.Close()
	h.api.next = at
	w := newWidget(h.ns, "w")
	h.create(w)

	at.away.Store(true)
	req, err := cloudevent.NewRequest(context.Background(), h.srv.URL, h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "API server") || resp.Header.Get(serverless.ResultHeader) != "" {
		t.Fatalf("API server away: %d Retry-After %q %q, want 503 with Retry-After naming the API server, not handled",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	at.away.Store(false)
	if a := h.post(h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false); a.code != http.StatusOK {
		t.Fatalf("API server back: %d %q, want 200", a.code, a.body)
	}
	own.Store(true)
	if a := h.post(h.event(cloudevent.Resource, cloudevent.Add, w, "widgets"), false); a.code != http.StatusInternalServerError {
		t.Fatalf("the reconcile's own failure: %d %q, want 500", a.code, a.body)
	}
}
