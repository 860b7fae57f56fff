package dev_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// failopManifests is `opzero manifests` of the failop fixture (its
// reconciler always fails; retries after 200 ms, at most 500 ms), with or
// without durable time, its sweep moved to once a year.
func failopManifests(t *testing.T, ns string, durable bool) []*unstructured.Unstructured {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Build(context.Background(), root, "./internal/devenv/dev/testdata/failop",
		manifests.Options{Namespace: ns, Source: manifests.SourceKnative, NoDurableTime: !durable, Args: []string{"--backoff-base=200ms", "--backoff-cap=500ms"}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		switch o.GetKind() {
		case "PingSource":
			_ = unstructured.SetNestedField(o.Object, "0 0 1 1 *", "spec", "schedule")
		case "ApiServerSource":
			// Only this test's namespace: failop fails every key, and the
			// other subtest's ConfigMap may change (its namespace is
			// deleted) while this one runs.
			unstructured.RemoveNestedField(o.Object, "spec", "namespaceSelector")
		}
	}
	return out
}

var reconcilesFailed = regexp.MustCompile(`(\d+) reconciles? \((\d+) failed\)`)

// TestStatusCountsFailedReconciles reproduces a status line that said
// "6 events (0 failed), 0 reconciles" while the reconciler failed over and
// over: with durable time every retry is a wakeup answered 200 ("reconcile
// failed, retry recorded"), without it a failure is answered 500. Either
// way the status line counts the failed reconciles and shows the last
// error, which names the key and the reconciler's error.
func TestStatusCountsFailedReconciles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and Knative's adapters")
	}
	for _, tc := range []struct {
		name    string
		durable bool
		want    int // failed reconciles to see
	}{{"durable time", true, 3}, {"no durable time", false, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Get(t)
			ns := env.Namespace(t)
			p, buf := startWithEvents(t, env, failopManifests(t, ns, tc.durable))
			t.Cleanup(func() { dumpLogs(t, p) })
			ctx := context.Background()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: ns}, Data: map[string]string{"a": "1"}}
			if err := env.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			if !tc.durable { // a second delivery: the retries in between are the instance's own
				testkit.Eventually(t, 30*time.Second, "the first delivery", func(context.Context) (bool, error) {
					return p.Services[0].Events.Load() >= 1, nil
				})
				cm.Data["a"] = "2"
				if err := env.Client.Update(ctx, cm); err != nil {
					t.Fatal(err)
				}
			}
			var line string
			if !testkit.Wait(time.Minute, func() bool {
				line = p.StatusLine()
				m := reconcilesFailed.FindStringSubmatch(line)
				n := 0
				if m != nil {
					n, _ = strconv.Atoi(m[2])
				}
				return n >= tc.want
			}) {
				t.Fatalf("status line %q: want at least %d failed reconciles", line, tc.want)
			}
			if want := "scripted failure of " + ns + "/doomed"; !strings.Contains(line, "last error") || !strings.Contains(line, want) {
				t.Errorf("status line %q: want the last error, %q", line, want)
			}
			t.Log(line)
			checkFailureEvents(t, buf.events(t), ns, tc.durable)
		})
	}
}

// checkFailureEvents: every delivery of the stream says why the operator
// was woken and which instance answered, and each failed reconcile is a
// reconcile-failed event with the error.
func checkFailureEvents(t *testing.T, events []dev.Event, ns string, durable bool) {
	t.Helper()
	wakes := map[string]int{}
	failed := 0
	for _, e := range events {
		switch e.Event {
		case dev.EventDelivery:
			wakes[e.Wake]++
			if e.PID == 0 {
				t.Errorf("delivery %+v: no instance", e)
			}
		case dev.EventReconcileFailed:
			failed += e.Failed
			if !strings.Contains(e.Message, "scripted failure of "+ns+"/doomed") {
				t.Errorf("reconcile-failed %+v: want the reconciler's error", e)
			}
		}
	}
	if wakes["create"] != 1 || failed < 2 {
		t.Errorf("wake reasons %v, %d failed reconciles: want one create and at least 2 failures", wakes, failed)
	}
	if durable && wakes["wakeup"] < 2 {
		t.Errorf("wake reasons %v: want retries delivered as wakeups", wakes)
	}
	if !durable && wakes["update"] != 1 {
		t.Errorf("wake reasons %v: want the update", wakes)
	}
}

// dumpLogs shows the tails of the session's logs if the test failed.
func dumpLogs(t *testing.T, p *dev.Platform) {
	if !t.Failed() {
		return
	}
	matches, _ := filepath.Glob(p.LogPath("*"))
	for _, m := range matches {
		b, _ := os.ReadFile(m)
		t.Logf("%s:\n%s", m, testkit.Tail(b, 30))
	}
}
