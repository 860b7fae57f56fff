package dev_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/testkit"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/testenv"
)

// syncBuffer is a bytes.Buffer safe for the platform's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// events decodes every line written so far; a line that is not one JSON
// object fails the test.
func (s *syncBuffer) events(t *testing.T) []dev.Event {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []dev.Event
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var e dev.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestEventStream: --events=json reports a session's life in order, one
// JSON object per line: ready with the Service's URL; for a ConfigWatcher
// created at zero instances, a cold process start with its pid, the
// process ready, the ApiServerSource's delivery (source, type, key, 200)
// and the reconcile; after the idle period the process stopped for
// idleness and scaled to zero.
func TestEventStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and Knative's adapters")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	createWebapp(t, env.Client, ns)
	p, buf := startWithEvents(t, env, fixture(t, ns))
	first := buf.events(t)
	svc := ns + "/configwatcher"
	if len(first) != 1 || first[0].Event != dev.EventReady || len(first[0].Services) != 1 ||
		first[0].Services[0] != (dev.ServiceEvent{Name: svc, URL: p.Services[0].URL}) || first[0].Time.IsZero() {
		t.Fatalf("after Start: %+v, want one ready event naming %s at %s", first, svc, p.Services[0].URL)
	}

	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config-watcher", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}}
	if err := env.Client.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	key := ns + "/" + cw.Name
	// in order, each matched at or after the previous one
	want := []struct {
		what  string
		match func(dev.Event) bool
	}{
		{"a cold start", func(e dev.Event) bool {
			return e.Event == dev.EventProcessStarted && e.Service == svc && e.ColdStart && e.PID > 0
		}},
		{"the process ready", func(e dev.Event) bool { return e.Event == dev.EventProcessReady && e.PID > 0 && e.ReadyMS > 0 }},
		{"the ConfigWatcher's delivery answered 200, a create that paid the cold start", func(e dev.Event) bool {
			return e.Event == dev.EventDelivery && e.Key == key && e.Kind == "ConfigWatcher" && e.Code == 200 &&
				e.Type == "dev.knative.apiserver.resource.add" && e.Source != "" && e.DurationMS > 0 &&
				e.Wake == dev.WakeCreate && e.ColdStart && e.PID > 0
		}},
		{"its reconcile", func(e dev.Event) bool { return e.Event == dev.EventReconciled && e.Key == key && e.Reconciled == 1 }},
		{"the process stopped for idleness", func(e dev.Event) bool {
			return e.Event == dev.EventProcessStopped && e.Reason == "idle" && e.PID > 0 && e.ExitCode != nil
		}},
		{"scaled to zero", func(e dev.Event) bool { return e.Event == dev.EventScaledToZero && e.Service == svc }},
	}
	var got []dev.Event
	testkit.Eventually(t, time.Minute, "the event stream", func(context.Context) (bool, error) {
		got = buf.events(t)
		i := 0
		for _, e := range got {
			if i < len(want) && want[i].match(e) {
				i++
			}
		}
		return i == len(want), nil
	})
	var started, stopped, delivered int
	for _, e := range got {
		switch {
		case e.Event == dev.EventProcessStarted && e.Service == svc:
			started = e.PID
		case e.Event == dev.EventDelivery && e.Key == key && delivered == 0:
			delivered = e.PID
		case e.Event == dev.EventProcessStopped:
			stopped = e.PID
		case e.Event == dev.EventError:
			t.Errorf("error event: %+v", e)
		}
	}
	if started != stopped || delivered != started {
		t.Errorf("started pid %d, delivered to pid %d, stopped pid %d: want the same process", started, delivered, stopped)
	}
	if t.Failed() {
		t.Logf("events: %+v (logs in %s)", got, filepath.Dir(p.LogPath("x")))
	}
}

// startWithEvents starts a dev session on env for objs (1 s idle period)
// whose event stream is collected in the returned buffer; it stops when the
// test ends.
func startWithEvents(t *testing.T, env *testenv.Env, objs []*unstructured.Unstructured) (*dev.Platform, *syncBuffer) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, Idle: time.Second, Out: testkit.LogWriter(t), Events: dev.NewEventWriter(buf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, buf
}
