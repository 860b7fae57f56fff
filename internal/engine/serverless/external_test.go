package serverless_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestExternalEvents: a CloudEvent from the Broker that passes a
// WatchesEvents filter is mapped to its keys and reconciled through the
// per-key queue; one that passes no filter is refused (400) and reaches no
// map function; no keys is a 2xx with the reason; a map function's
// TerminalError is a 400, any other error a 503; nothing is reconciled then.
func TestExternalEvents(t *testing.T) {
	p := newProbe()
	var ns string
	mapped := 0
	bySubject := func(_ context.Context, _ client.Reader, e event.Event) ([]reconcile.Request, error) {
		mapped++
		switch e.Subject() {
		case "":
			return nil, nil
		case "bad":
			return nil, reconcile.TerminalError(errors.New("subject names no database"))
		case "fail":
			return nil, errors.New("the API server could not be read")
		}
		return []reconcile.Request{req(ns, e.Subject())}, nil
	}
	h := newHarness(t, p, func(b *builder.Builder) *builder.Builder {
		return b.WatchesEvents("drift", builder.EventFilter{Filters: []builder.TriggerFilter{
			{Prefix: map[string]string{"type": "com.example.db."}},
			{Not: &builder.TriggerFilter{Exact: map[string]string{"source": "/ignored"}}},
		}}, bySubject)
	}, serverless.Options{})
	ns = h.ns
	h.create(newWidget(ns, "w"))
	ext := func(typ, source, subject string) *event.Event {
		e := event.New()
		e.SetID("1")
		e.SetType(typ)
		e.SetSource(source)
		e.SetSubject(subject)
		_ = e.SetData("application/json", map[string]string{"db": subject})
		return &e
	}
	cases := []struct {
		name       string
		ev         *event.Event
		structured bool
		code       int
		want       string // in the body or the Opzero-Result header
		mapped     int    // map function calls
		reconciles int64
	}{
		{"matching, binary", ext("com.example.db.role-dropped", "/pg", "w"), false, 200, "reconciled 1 key(s): event com.example.db.role-dropped 1 via drift", 1, 1},
		{"matching, structured", ext("com.example.db.role-dropped", "/pg", "w"), true, 200, "via drift", 1, 1},
		{"type filtered out", ext("com.example.other", "/pg", "w"), false, 400, "passing drift (filters[prefix type=com.example.db., not(exact source=/ignored)])", 0, 0},
		{"source filtered out by not", ext("com.example.db.x", "/ignored", "w"), false, 400, "no route", 0, 0},
		{"maps to no key", ext("com.example.db.x", "/pg", ""), false, 200, "maps to no key", 1, 0},
		{"map says the event is bad", ext("com.example.db.x", "/pg", "bad"), false, 400, "subject names no database", 1, 0},
		{"map fails", ext("com.example.db.x", "/pg", "fail"), false, 503, "could not be read", 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mapped = 0
			before := p.calls.Load()
			a := h.post(tc.ev, tc.structured)
			if a.code != tc.code || !strings.Contains(a.body+a.result, tc.want) {
				t.Fatalf("got %d %q (result %q), want %d mentioning %q", a.code, a.body, a.result, tc.code, tc.want)
			}
			if mapped != tc.mapped || p.calls.Load()-before != tc.reconciles {
				t.Fatalf("map function called %d times, %d reconciles; want %d and %d", mapped, p.calls.Load()-before, tc.mapped, tc.reconciles)
			}
		})
	}
	if got := p.spansOf(req(ns, "w")); len(got) != 2 {
		t.Errorf("%s/w reconciled %d times, want 2", ns, len(got))
	}
}
