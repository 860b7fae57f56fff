package serverless_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestBadInput: every class of bad input gets a clear 4xx, and nothing is
// reconciled or written; a Reference event for a missing object is a
// correct no-op (the reconciler sees NotFound, as with an informer).
func TestBadInput(t *testing.T) {
	p := newProbe()
	h := newHarness(t, p, nil, serverless.Options{MaxBodyBytes: 64 << 10})
	w := newWidget(h.ns, "w")
	h.create(w)
	good := func() *event.Event { return h.event(cloudevent.Resource, cloudevent.Update, w, "widgets") }
	raw := func(method, ctype string, body []byte, hdr map[string]string) func() answer {
		return func() answer {
			req, _ := http.NewRequestWithContext(context.Background(), method, h.srv.URL, bytes.NewReader(body))
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			return h.do(req)
		}
	}
	mutated := func(f func(e *event.Event)) func() answer {
		return func() answer { ev := good(); f(ev); return h.post(ev, false) }
	}
	binHdr := map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": "dev.knative.apiserver.resource.update",
		"ce-kind": "Widget", "ce-apiversion": "test.opzero.dev/v1", "ce-name": "w", "ce-namespace": h.ns}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: h.ns}}
	cases := []struct {
		name string
		send func() answer
		code int
		want string
	}{
		{"GET", raw(http.MethodGet, "", nil, nil), 405, "POST"},
		{"not a CloudEvent", raw(http.MethodPost, "application/json", []byte(`{"kind":"Widget"}`), nil), 400, "not a CloudEvent"},
		{"structured, invalid JSON", raw(http.MethodPost, "application/cloudevents+json", []byte(`{"specversion":`), nil), 400, "malformed CloudEvent"},
		{"structured, missing id", raw(http.MethodPost, "application/cloudevents+json", []byte(`{"specversion":"1.0","type":"t","source":"s"}`), nil), 400, "id"},
		{"binary, data not JSON", raw(http.MethodPost, "application/json", []byte(`not json`), binHdr), 400, "not a JSON object"},
		{"binary, wrong content type", raw(http.MethodPost, "text/plain", []byte(`{}`), binHdr), 400, "content type"},
		{"too large", raw(http.MethodPost, "application/json", bytes.Repeat([]byte("x"), 70<<10), binHdr), 413, "larger than"},
		{"missing extension", mutated(func(e *event.Event) { e.SetExtension("name", nil) }), 400, `"name" extension`},
		{"unknown action", mutated(func(e *event.Event) { e.SetType("dev.knative.apiserver.resource.poke") }), 400, "unknown action"},
		{"subject disagrees", mutated(func(e *event.Event) { e.SetSubject("/apis/test.opzero.dev/v1/namespaces/" + h.ns + "/widgets/other") }), 400, "subject"},
		{"object disagrees with extensions", mutated(func(e *event.Event) { e.SetExtension("name", "other") }), 400, "disagrees"},
		{"unexpected apiVersion", func() answer {
			u := w.DeepCopy()
			u.SetAPIVersion("test.opzero.dev/v2")
			return h.post(h.event(cloudevent.Resource, cloudevent.Update, u, "widgets"), false)
		}, 400, "not watched"},
		{"kind not watched", func() answer { return h.post(h.event(cloudevent.Resource, cloudevent.Add, cm, "configmaps"), false) }, 400, "not watched"},
		{"unknown event type", func() answer { return h.post(cloudevent.NewPingLike("com.example.unknown"), false) }, 400, "no route"},
		{"ping with bad data", func() answer { return h.post(cloudevent.NewPing("p", []byte(`[1,2]`)), false) }, 400, "PingSource"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reconciles, calls := p.calls.Load(), h.api.calls.Load()
			a := tc.send()
			if a.code != tc.code || !strings.Contains(a.body, tc.want) {
				t.Fatalf("got %d %q, want %d mentioning %q", a.code, a.body, tc.code, tc.want)
			}
			if p.calls.Load() != reconciles || h.api.calls.Load() != calls {
				t.Fatalf("bad input caused %d reconciles and %d API calls, want none", p.calls.Load()-reconciles, h.api.calls.Load()-calls)
			}
		})
	}

	t.Run("Reference event for a missing object", func(t *testing.T) {
		gone := newWidget(h.ns, "never-created")
		before := p.calls.Load()
		a := h.post(h.event(cloudevent.Reference, cloudevent.Delete, gone, "widgets"), false)
		if a.code != 200 || p.calls.Load() != before+1 {
			t.Fatalf("got %d %s with %d reconciles; want 200 and one reconcile that finds nothing", a.code, a.body, p.calls.Load()-before)
		}
	})
}
