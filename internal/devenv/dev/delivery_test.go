package dev

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/activator"
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

func TestOperatorsWake(t *testing.T) {
	for reason, want := range map[string][2]string{
		"update ConfigMap": {WakeUpdate, "ConfigMap"}, "create Foo": {WakeCreate, "Foo"}, "wakeup Retry": {WakeWakeup, "Retry"},
		"full_sweep": {WakeSweep, ""}, "ping": {WakeSweep, ""}, "sweep": {WakeSweep, ""}, "external": {WakeExternal, ""},
	} {
		if w, d, ok := operatorsWake(reason); !ok || w != want[0] || d != want[1] {
			t.Errorf("%q: %s %q %v, want %v", reason, w, d, ok, want)
		}
	}
	for _, reason := range []string{"", "teleport"} {
		if _, _, ok := operatorsWake(reason); ok {
			t.Errorf("%q: known", reason)
		}
	}
}

// TestServiceRecordsDelivery: a request through a Service's activator
// becomes a Delivery with the wake reason, the instance, the cold start,
// the answer read back (here a 200 "retry recorded" and a 500, both failed
// reconciles), the trace ID the operator names, and the last error; a
// structured-mode event takes the operator's own wake reason.
func TestServiceRecordsDelivery(t *testing.T) {
	s := &Service{Name: "op", Namespace: "ns", Activator: activatorOf(t)}
	send := func(answer, ceType string) Delivery {
		r := httptest.NewRequest("POST", "/?answer="+answer, nil)
		if ceType != "" {
			r.Header.Set("Ce-Type", ceType)
			r.Header.Set("Ce-Kind", "ConfigMap")
			r.Header.Set("Ce-Namespace", "ns")
			r.Header.Set("Ce-Name", "a")
		}
		s.ServeHTTP(httptest.NewRecorder(), r)
		ds := s.Deliveries()
		return ds[len(ds)-1]
	}
	d := send("retry", "dev.knative.apiserver.resource.add")
	if d.Wake != WakeCreate || d.Instance == 0 || !d.Cold || d.Failed != 1 || d.Code != 200 || d.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("first delivery %+v: want a create that paid a cold start, one failed reconcile, its trace", d)
	}
	d = send("500", "dev.knative.apiserver.resource.update")
	if d.Wake != WakeUpdate || d.Cold || d.Failed != 1 || d.Code != 500 || !strings.Contains(d.Error, "retry scheduled") {
		t.Errorf("second delivery %+v: want a warm update, 500, one failed reconcile with the error", d)
	}
	if last, ok := s.LastError(); !ok || last.Code != 500 || s.FailedReconciles.Load() != 2 || s.Failures.Load() != 1 {
		t.Errorf("last error %+v; %d failed reconciles, %d failed events: want the 500, 2, 1", last, s.FailedReconciles.Load(), s.Failures.Load())
	}
	d = send("structured", "")
	if d.Wake != WakeUpdate || d.Kind != "ConfigMap" || d.Reconciled != 1 || s.Reconciles.Load() != 1 {
		t.Errorf("structured-mode delivery %+v: want the operator's wake reason, update ConfigMap, reconciled", d)
	}
}

// TestAnswerBackend is not a test: with DEV_ANSWER_BACKEND=1 the test
// binary (run with -test.short, so TestMain starts no control plane) is an
// operator for activatorOf, answering /healthz and, on /, what
// TestServiceRecordsDelivery's ?answer= names.
func TestAnswerBackend(t *testing.T) {
	if os.Getenv("DEV_ANSWER_BACKEND") != "1" {
		t.Skip("the backend of TestServiceRecordsDelivery")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("answer") {
		case "retry":
			w.Header().Set("Opzero-Result", "reconcile failed, retry recorded: ns/a: boom (retry in 1s)")
			w.Header().Set(traceHeader, "4bf92f3577b34da6a3ce929d0e0e4736")
		case "500":
			http.Error(w, "reconcile failed, retry scheduled: ns/a: boom (retry in 1s)", 500)
		case "structured":
			w.Header().Set(wakeReasonHeader, "update ConfigMap")
			w.Header().Set("Opzero-Result", "reconciled 1 key(s): update ConfigMap ns/a")
		}
	})
	_ = http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux)
}

// activatorOf runs TestAnswerBackend behind an activator, until the test ends.
func activatorOf(t *testing.T) *activator.Activator {
	a := activator.New(activator.Options{Idle: time.Minute, Command: func() *exec.Cmd {
		c := exec.Command(os.Args[0], "-test.run=^TestAnswerBackend$", "-test.short")
		c.Env = append(os.Environ(), "DEV_ANSWER_BACKEND=1")
		return c
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}
