package broker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/cloudevent/receive"
	"github.com/opzero/opzero/internal/devenv/broker"
	"github.com/opzero/opzero/internal/eventfilter"
)

// sink records what it is sent and answers with the codes given, in turn
// (the last one from then on).
type sink struct {
	*httptest.Server
	mu     sync.Mutex
	events []*event.Event
	auth   []string
	codes  []int
}

func newSink(t *testing.T, codes ...int) *sink {
	s := &sink{codes: codes}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := receive.Read(r)
		if err != nil {
			t.Errorf("the sink got no CloudEvent: %v", err)
		}
		s.mu.Lock()
		s.events = append(s.events, ev)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		code := s.codes[min(len(s.events), len(s.codes))-1]
		s.mu.Unlock()
		w.WriteHeader(code)
		if code >= 300 {
			_, _ = w.Write([]byte("no thanks"))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) got() []*event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*event.Event(nil), s.events...)
}

// bed is an ingress with one Broker (ns/b) whose waits are recorded, not taken.
type bed struct {
	in       *broker.Ingress
	srv      *httptest.Server
	mu       sync.Mutex
	waits    []time.Duration
	outcomes chan broker.Outcome
}

func newBed(t *testing.T, triggers ...*broker.Trigger) *bed {
	ctx, cancel := context.WithCancel(context.Background())
	b := &bed{outcomes: make(chan broker.Outcome, 100)}
	b.in = broker.New(ctx, broker.Options{
		Sleep: func(_ context.Context, d time.Duration) error {
			b.mu.Lock()
			b.waits = append(b.waits, d)
			b.mu.Unlock()
			return nil
		},
		Logf:      t.Logf,
		Delivered: func(o broker.Outcome) { b.outcomes <- o },
	})
	b.in.Set("ns", "b", triggers)
	b.srv = httptest.NewServer(b.in)
	t.Cleanup(func() { b.srv.Close(); cancel(); b.in.Wait() })
	return b
}

func (b *bed) post(t *testing.T, ev *event.Event, structured bool) int {
	t.Helper()
	req, err := cloudevent.NewRequest(context.Background(), b.srv.URL+broker.Path("ns", "b"), ev, structured)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// outcome waits for the next delivery outcome.
func (b *bed) outcome(t *testing.T) broker.Outcome {
	t.Helper()
	select {
	case o := <-b.outcomes:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery outcome within 10s")
	}
	return broker.Outcome{}
}

func newEvent(id, typ string) *event.Event {
	e := event.New()
	e.SetID(id)
	e.SetType(typ)
	e.SetSource("/test")
	_ = e.SetData("application/json", map[string]string{"id": id})
	return &e
}

func typeFilter(prefix string) eventfilter.Spec {
	return eventfilter.Spec{Filters: []eventfilter.Filter{{Prefix: map[string]string{"type": prefix}}}}
}

// TestFilteredAndDeliveredOnce: an event no Trigger's filter passes reaches
// no subscriber; one that passes is delivered once when answered 2xx, in
// binary and structured mode, stamped with knativearrivaltime.
func TestFilteredAndDeliveredOnce(t *testing.T) {
	db, other := newSink(t, 200), newSink(t, 200)
	b := newBed(t,
		&broker.Trigger{Name: "ns/db", Filter: typeFilter("com.example.db."), Subscriber: broker.Target{URL: db.URL}, Delivery: broker.Delivery{Retry: 5}},
		&broker.Trigger{Name: "ns/other", Filter: eventfilter.Spec{Attributes: map[string]string{"type": "com.example.other"}}, Subscriber: broker.Target{URL: other.URL}})
	if code := b.post(t, newEvent("1", "com.example.web.hook"), false); code != http.StatusAccepted {
		t.Fatalf("ingress answered %d, want 202", code)
	}
	if code := b.post(t, newEvent("2", "com.example.db.changed"), false); code != http.StatusAccepted {
		t.Fatalf("ingress answered %d, want 202", code)
	}
	if code := b.post(t, newEvent("3", "com.example.db.dropped"), true); code != http.StatusAccepted {
		t.Fatalf("ingress answered %d, want 202", code)
	}
	for range 2 {
		if o := b.outcome(t); !o.Delivered || o.Attempts != 1 || o.Trigger != "ns/db" {
			t.Errorf("outcome %+v, want delivered to ns/db at the first attempt", o)
		}
	}
	b.in.Wait()
	got := db.got()
	if len(got) != 2 || len(other.got()) != 0 {
		t.Fatalf("db got %d events, other %d; want 2 and 0", len(got), len(other.got()))
	}
	ids := map[string]bool{}
	for _, e := range got {
		ids[e.ID()] = true
		if _, ok := e.Extensions()[broker.ArrivalTimeExtension]; !ok {
			t.Errorf("event %s has no %s", e.ID(), broker.ArrivalTimeExtension)
		}
	}
	if !ids["2"] || !ids["3"] {
		t.Errorf("db got events %v, want 2 and 3", ids)
	}
}

// TestRetriesThenDeadLetter: a 5xx is retried delivery.retry times with
// the policy's waits, then the event goes to the dead-letter sink with
// Knative's error extensions.
func TestRetriesThenDeadLetter(t *testing.T) {
	for _, tc := range []struct {
		policy string
		waits  []time.Duration
	}{
		{"exponential", []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}},
		{"linear", []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			sub, dls := newSink(t, 503), newSink(t, 202)
			d, err := broker.ParseDelivery(ptr(int64(3)), tc.policy, "PT0.1S")
			if err != nil {
				t.Fatal(err)
			}
			d.DeadLetter = broker.Target{URL: dls.URL}
			b := newBed(t, &broker.Trigger{Name: "ns/t", Filter: typeFilter("com.example."), Subscriber: broker.Target{URL: sub.URL}, Delivery: d})
			b.post(t, newEvent("e1", "com.example.x"), false)
			o := b.outcome(t)
			if o.Delivered || !o.DeadLettered || o.Attempts != 4 || o.Code != 503 {
				t.Fatalf("outcome %+v, want 4 attempts, last 503, dead-lettered", o)
			}
			if n := len(sub.got()); n != 4 {
				t.Errorf("the subscriber got %d attempts, want 4", n)
			}
			b.mu.Lock()
			waits := b.waits
			b.mu.Unlock()
			if !equal(waits, tc.waits) {
				t.Errorf("waits %v, want %v", waits, tc.waits)
			}
			dl := dls.got()
			if len(dl) != 1 || dl[0].ID() != "e1" {
				t.Fatalf("dead-letter sink got %v, want event e1 once", dl)
			}
			x := dl[0].Extensions()
			data, _ := base64.StdEncoding.DecodeString(str(x[broker.ErrorDataExtension]))
			if str(x[broker.ErrorDestExtension]) != sub.URL || str(x[broker.ErrorCodeExtension]) != "503" || string(data) != "no thanks" {
				t.Errorf("dead-letter extensions %v, want dest %s, code 503, data base64(no thanks)", x, sub.URL)
			}
			if !bytes.Contains(dl[0].Data(), []byte(`"e1"`)) {
				t.Errorf("dead-lettered data %s, want the original", dl[0].Data())
			}
		})
	}
}

// TestNotRetried: a 400 is not retried (Knative's SelectiveRetry); a
// subscriber that recovers gets the event on a later attempt, and the
// dead-letter sink nothing; without a dead-letter sink a failed event is
// dropped.
func TestNotRetried(t *testing.T) {
	bad, flaky, dls := newSink(t, 400), newSink(t, 500, 429, 200), newSink(t, 200)
	d := broker.Delivery{Retry: 5, Policy: "exponential", Delay: time.Millisecond, DeadLetter: broker.Target{URL: dls.URL}}
	b := newBed(t,
		&broker.Trigger{Name: "ns/bad", Filter: typeFilter("bad."), Subscriber: broker.Target{URL: bad.URL}, Delivery: d},
		&broker.Trigger{Name: "ns/flaky", Filter: typeFilter("flaky."), Subscriber: broker.Target{URL: flaky.URL}, Delivery: d},
		&broker.Trigger{Name: "ns/nodls", Filter: typeFilter("nodls."), Subscriber: broker.Target{URL: bad.URL}})
	b.post(t, newEvent("b", "bad.x"), false)
	if o := b.outcome(t); o.Attempts != 1 || !o.DeadLettered {
		t.Errorf("400: outcome %+v, want 1 attempt, dead-lettered", o)
	}
	b.post(t, newEvent("f", "flaky.x"), false)
	if o := b.outcome(t); o.Attempts != 3 || !o.Delivered || o.DeadLettered {
		t.Errorf("500, 429, 200: outcome %+v, want delivered at attempt 3", o)
	}
	b.post(t, newEvent("n", "nodls.x"), false)
	if o := b.outcome(t); o.Attempts != 1 || o.Delivered || o.DeadLettered {
		t.Errorf("no dead-letter sink: outcome %+v, want dropped after 1 attempt", o)
	}
	if n := len(dls.got()); n != 1 {
		t.Errorf("dead-letter sink got %d events, want 1 (the 400)", n)
	}
}

// TestBadInput: what is not a valid CloudEvent is refused with 400 (or
// 404, 405) and delivered nowhere.
func TestBadInput(t *testing.T) {
	sub := newSink(t, 200)
	b := newBed(t, &broker.Trigger{Name: "ns/all", Filter: eventfilter.Spec{}, Subscriber: broker.Target{URL: sub.URL}})
	url := b.srv.URL + broker.Path("ns", "b")
	raw := func(method, url, ctype, body string, hdr map[string]string) *http.Request {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return req
	}
	bin := map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-source": "/s"} // no ce-type
	for _, tc := range []struct {
		name string
		req  *http.Request
		code int
	}{
		{"wrong content type, no ce- headers", raw("POST", url, "text/plain", "hello", nil), 400},
		{"plain JSON", raw("POST", url, "application/json", `{"a":1}`, nil), 400},
		{"structured, missing id", raw("POST", url, "application/cloudevents+json", `{"specversion":"1.0","type":"t","source":"/s"}`, nil), 400},
		{"structured, not JSON", raw("POST", url, "application/cloudevents+json", `{"specversion":`, nil), 400},
		{"binary, missing type", raw("POST", url, "application/json", `{}`, bin), 400},
		{"GET", raw("GET", url, "", "", nil), 405},
		{"no such Broker", raw("POST", b.srv.URL+"/ns/other", "application/cloudevents+json", `{}`, nil), 404},
	} {
		if code := do(t, tc.req); code != tc.code {
			t.Errorf("%s: answered %d, want %d", tc.name, code, tc.code)
		}
	}
	b.in.Wait()
	if n := len(sub.got()); n != 0 {
		t.Errorf("bad input delivered %d events, want none", n)
	}
}

// TestTokens: deliveries to a subscriber with an audience carry a token of
// the Trigger's identity for that audience.
func TestTokens(t *testing.T) {
	sub := newSink(t, 200)
	b := newBed(t, &broker.Trigger{Name: "ns/t", Filter: typeFilter("x"), Subscriber: broker.Target{URL: sub.URL, Audience: "opzero:ns:op"},
		Token: func(_ context.Context, aud string) (string, error) { return "token-for-" + aud, nil }})
	b.post(t, newEvent("1", "x.y"), false)
	b.outcome(t)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.auth) != 1 || sub.auth[0] != "Bearer token-for-opzero:ns:op" {
		t.Errorf("Authorization %q, want a bearer token for opzero:ns:op", sub.auth)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"PT0.5S": 500 * time.Millisecond, "PT1S": time.Second, "PT2M": 2 * time.Minute, "PT1H30M": 90 * time.Minute,
		"P1D": 24 * time.Hour, "P1W": 7 * 24 * time.Hour, "P1DT1S": 24*time.Hour + time.Second, "PT0,2S": 200 * time.Millisecond, "pt3s": 3 * time.Second,
	} {
		if got, err := broker.ParseDuration(in); err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "P", "PT", "500ms", "1S", "PT1", "P1H", "PTS", "P1Y", "P2M", "PT1S1H2", "PT1ST1S"} {
		if _, err := broker.ParseDuration(in); err == nil || !strings.Contains(err.Error(), "ISO-8601") {
			t.Errorf("%q: error %v, want one naming ISO-8601", in, err)
		}
	}
	if _, err := broker.ParseDelivery(ptr(int64(-1)), "", ""); err == nil {
		t.Error("retry -1 accepted")
	}
	if _, err := broker.ParseDelivery(nil, "random", ""); err == nil || !strings.Contains(err.Error(), "exponential or linear") {
		t.Errorf("policy random: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// str is an extension's value as a string (binary mode delivers strings).
func str(v any) string { return fmt.Sprint(v) }

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
