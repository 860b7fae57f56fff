package dev_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/cloudevent/receive"
	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// deadLetters is a dead-letter sink that records what it gets.
type deadLetters struct {
	*httptest.Server
	mu     sync.Mutex
	events []*event.Event
}

func newDeadLetters(t *testing.T) *deadLetters {
	d := &deadLetters{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := receive.Read(r)
		if err != nil {
			t.Errorf("the dead-letter sink got no CloudEvent: %v", err)
		}
		d.mu.Lock()
		d.events = append(d.events, ev)
		d.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *deadLetters) got() []*event.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*event.Event(nil), d.events...)
}

// TestBrokerThroughDev: `opzero manifests` of an operator with
// WatchesEvents, played by `opzero dev`: the Broker and the Trigger are
// Ready with local addresses; an event posted to the Broker's
// status.address.url that the Trigger's filter refuses never reaches the
// operator; one it passes wakes the operator from zero and reconciles the
// mapped key; one whose map function fails is answered 503, retried
// delivery.retry times, then sent to the dead-letter sink with Knative's
// error extensions; bad input is refused with 400 and goes nowhere.
func TestBrokerThroughDev(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "reconciles")
	dls := newDeadLetters(t)
	objs, err := manifests.Build(context.Background(), root, "./internal/devenv/dev/testdata/eventsop", manifests.Options{
		Namespace: ns, Source: manifests.SourceKnative, NoDurableTime: true, Env: []description.EnvVar{{Name: "EVENTSOP_LOG", Value: logFile}},
		Delivery: manifests.Delivery{Retry: 2, BackoffPolicy: "linear", BackoffDelay: "PT0.05S", DeadLetterSink: dls.URL}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	all, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var keep []*unstructured.Unstructured
	for _, u := range all {
		if u.GetKind() != "ApiServerSource" { // only the Broker's events here
			keep = append(keep, u)
			kinds = append(kinds, u.GetKind())
		}
	}
	if s := strings.Join(kinds, ","); !strings.Contains(s, "Broker,Trigger") {
		t.Fatalf("manifests have %s, want a Broker and a Trigger", s)
	}
	p := start(t, env, keep, time.Minute)
	svc := p.Services[0]

	ctx := context.Background()
	get := func(kind, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("eventing.knative.dev/v1")
		u.SetKind(kind)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	b := get("Broker", "eventsop")
	addr, _, _ := unstructured.NestedString(b.Object, "status", "address", "url")
	if !ready(b) || !strings.HasPrefix(addr, "http://127.0.0.1:") {
		t.Fatalf("Broker status %v: want Ready and a local address", b.Object["status"])
	}
	tr := get("Trigger", "eventsop-drift")
	sub, _, _ := unstructured.NestedString(tr.Object, "status", "subscriberUri")
	sa, _, _ := unstructured.NestedString(tr.Object, "status", "auth", "serviceAccountName")
	if !ready(tr) || sub != svc.URL || sa != "eventsop-drift-oidc-eventing.knative.dev-trigger" {
		t.Fatalf("Trigger status %v: want Ready, subscriberUri %s and its OIDC identity", tr.Object["status"], svc.URL)
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db1", Namespace: ns, Labels: map[string]string{"app": "eventsop"}}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if n := svc.Activator.Instances(); n != 0 {
		t.Fatalf("%d instances before any event, want 0", n)
	}
	post := func(typ, subject string) int {
		e := event.New()
		e.SetID(typ + "-" + subject)
		e.SetType(typ)
		e.SetSource("/eventsop-test")
		e.SetSubject(subject)
		_ = e.SetData("application/json", map[string]string{"note": "from a test"})
		req, err := cloudevent.NewRequest(ctx, addr, &e, false)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Filtered out: the ingress takes it and sends it nowhere.
	if code := post("com.example.other", ns+"/db1"); code != http.StatusAccepted {
		t.Fatalf("Broker ingress answered %d, want 202", code)
	}
	if code := post("com.example.drift.role-dropped", ns+"/db1"); code != http.StatusAccepted {
		t.Fatalf("Broker ingress answered %d, want 202", code)
	}
	want := ns + "/db1"
	testkit.Eventually(t, 30*time.Second, "the drift event reconciles "+want, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(logFile)
		if !strings.Contains(string(b), want) {
			return false, fmt.Errorf("reconciles so far: %q", b)
		}
		// dev counts a delivery once its answer is back, after the reconcile.
		if svc.Events.Load() == 0 {
			return false, errors.New("the delivery's answer is not back yet")
		}
		return true, nil
	})
	if cs := svc.Activator.ColdStarts.Load(); cs != 1 {
		t.Errorf("%d cold starts, want 1 (woken from zero by the event)", cs)
	}
	if n := svc.Events.Load(); n != 1 {
		t.Errorf("the operator got %d events, want 1: the filtered-out one must not reach it", n)
	}

	// A failing map function: 503, retried twice (linear backoff), then dead-lettered.
	post("com.example.drift.x", "fail")
	testkit.Eventually(t, 30*time.Second, "the failing event is dead-lettered", func(context.Context) (bool, error) {
		if n := len(dls.got()); n != 1 {
			return false, fmt.Errorf("%d dead letters", n)
		}
		return true, nil
	})
	dl := dls.got()[0]
	x := dl.Extensions()
	if dl.Subject() != "fail" || x["knativeerrorcode"] != "503" || x["knativeerrordest"] != svc.URL {
		t.Errorf("dead letter %s with extensions %v: want subject fail, knativeerrorcode 503, knativeerrordest %s", dl.ID(), x, svc.URL)
	}
	if n, f := svc.Events.Load(), svc.Failures.Load(); n != 4 || f != 3 {
		t.Errorf("the operator answered %d events (%d failed), want 4 (3 failed: 1 attempt + 2 retries)", n, f)
	}
	// The attempts' times: the second retry came at least backoffDelay
	// (50 ms) after the first (linear: retry n waits (n-1)*delay). Only a
	// lower bound: timers never fire early, so this cannot flake.
	var at []int64
	b2, _ := os.ReadFile(logFile)
	for _, l := range strings.Split(string(b2), "\n") {
		if ts, ok := strings.CutPrefix(l, "fail "); ok {
			n, _ := strconv.ParseInt(ts, 10, 64)
			at = append(at, n)
		}
	}
	if len(at) != 3 {
		t.Fatalf("the map function saw %d attempts of the failing event, want 3", len(at))
	}
	if gap := time.Duration(at[2] - at[1]); gap < 50*time.Millisecond {
		t.Errorf("the second retry came %s after the first, want at least the 50ms backoff", gap)
	}

	// Bad input: 400, nothing delivered.
	for _, tc := range []struct{ name, ctype, body string }{
		{"wrong content type", "text/plain", "hello"},
		{"missing id", "application/cloudevents+json", `{"specversion":"1.0","type":"com.example.drift.x","source":"/s","subject":"` + want + `"}`},
	} {
		resp, err := http.Post(addr, tc.ctype, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: answered %d, want 400", tc.name, resp.StatusCode)
		}
	}
	if n := svc.Events.Load(); n != 4 {
		t.Errorf("bad input reached the operator: %d events, want 4", n)
	}

	// After the session, nothing reads the dead ingress as Ready.
	p.Stop()
	for _, kind := range []string{"Broker", "Trigger"} {
		name := map[string]string{"Broker": "eventsop", "Trigger": "eventsop-drift"}[kind]
		u := get(kind, name)
		url, _, _ := unstructured.NestedString(u.Object, "status", "address", "url")
		sub, _, _ := unstructured.NestedString(u.Object, "status", "subscriberUri")
		if ready(u) || url != "" || sub != "" {
			t.Errorf("%s %s after Stop: status %v, want not Ready and no local URL", kind, name, u.Object["status"])
		}
	}
}

func ready(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}
