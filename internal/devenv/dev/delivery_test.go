package dev

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReadAnswer: the answers package serverless writes are read back as
// reconciles and failed reconciles, with the error; a 200 that reports a
// failure (durable time) counts as one, as do 500, 422 and a 503 of an
// API server away; other failed answers are errors without a reconcile.
func TestReadAnswer(t *testing.T) {
	for _, tc := range []struct {
		code         int
		result, body string
		want         answer
	}{
		{200, "reconciled 1 key(s): add ConfigMap ns/a", "", answer{reconciled: 1}},
		{200, "reconciled 3 key(s), handed off 1: ns/c: handed off to 10.0.0.1", "", answer{reconciled: 3}},
		{200, "reconcile failed, retry recorded: ns/a: scripted failure of ns/a (retry in 1s)", "",
			answer{failed: 1, err: "reconcile failed, retry recorded: ns/a: scripted failure of ns/a (retry in 1s)"}},
		{500, "", "reconcile failed, retry scheduled: ns/a: boom: dial tcp: refused (retry in 1s); ns/b: boom (retry in 2s)\n",
			answer{failed: 2, err: "reconcile failed, retry scheduled: ns/a: boom: dial tcp: refused (retry in 1s); ns/b: boom (retry in 2s)"}},
		{422, "", "reconcile failed terminally, not retried: ns/a: bad spec\n", answer{failed: 1, err: "reconcile failed terminally, not retried: ns/a: bad spec"}},
		{503, "", "ns/a: the API server cannot be reached or is overloaded (retry scheduled here too): connection refused\n",
			answer{failed: 1, err: "ns/a: the API server cannot be reached or is overloaded (retry scheduled here too): connection refused"}},
		{503, "", "activator: the operator exited during its start (see its log)\n", answer{err: "activator: the operator exited during its start (see its log)"}},
		{400, "", "", answer{err: "400 Bad Request"}},
		{202, "accepted 1 key(s): add ConfigMap ns/a", "", answer{}},
		{200, "skipped: generation 3 already observed", "", answer{}},
	} {
		if got := readAnswer(tc.code, tc.result, tc.body); got != tc.want {
			t.Errorf("%d %q %q: %+v, want %+v", tc.code, tc.result, tc.body, got, tc.want)
		}
	}
}

func TestWakeReason(t *testing.T) {
	for ceType, want := range map[string]string{
		"dev.knative.apiserver.resource.add": WakeCreate, "dev.knative.apiserver.ref.update": WakeUpdate,
		"dev.knative.apiserver.resource.delete": WakeDelete, "dev.knative.sources.ping": WakeSweep,
		"dev.opzero.wakeup": WakeWakeup, "com.example.order.paid": WakeExternal, "": WakeExternal,
		"dev.knative.apiserver.resource.patch": WakeExternal,
	} {
		h := http.Header{}
		if ceType != "" {
			h.Set("Ce-Type", ceType)
		}
		if got := wakeReason(h); got != want {
			t.Errorf("%q: %s, want %s", ceType, got, want)
		}
	}
}

// TestDeliveryLine: the -v line has the time, Service, wake reason, object,
// instance, cold start, code, latency and what the answer said.
func TestDeliveryLine(t *testing.T) {
	at := time.Date(2026, 11, 23, 13, 2, 11, 123e6, time.UTC)
	got := DeliveryLine(Event{Time: at, Event: EventDelivery, Service: "ns/op", Wake: WakeCreate, Kind: "ConfigMap", Key: "ns/a",
		PID: 4242, ColdStart: true, Code: 200, DurationMS: 812.34, Result: "reconciled 1 key(s): add ConfigMap ns/a"})
	want := "13:02:11.123 ns/op: create ConfigMap ns/a -> pid 4242 (cold start), 200 in 812 ms: reconciled 1 key(s): add ConfigMap ns/a"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	got = DeliveryLine(Event{Time: at, Service: "ns/op", Wake: WakeWakeup, WakeupReason: "Retry", Kind: "ConfigMap", Key: "ns/a",
		PID: 7, Code: 500, DurationMS: 3.25, Message: "reconcile failed, retry scheduled: ns/a: boom (retry in 1s)"})
	if !strings.Contains(got, "wakeup (Retry) ConfigMap ns/a -> pid 7, 500 in 3.2 ms: reconcile failed") {
		t.Errorf("wakeup line %q", got)
	}
}

func TestClip(t *testing.T) {
	if got := clip("a  b\nc", 10); got != "a b c" {
		t.Errorf("clip: %q", got)
	}
	if got := clip(strings.Repeat("é", 20), 10); got != strings.Repeat("é", 7)+"..." {
		t.Errorf("clip: %q", got)
	}
}
