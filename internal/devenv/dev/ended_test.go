package dev_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// endedCheck asserts that opzero dev's exit left u not ready, with reason
// DevSessionEnded on every condition and none of the local URL fields.
func endedCheck(t *testing.T, u *unstructured.Unstructured, urlFields ...string) {
	t.Helper()
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	if len(conds) == 0 {
		t.Errorf("%s %s: no conditions", u.GetKind(), u.GetName())
	}
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["status"] != "False" || m["reason"] != dev.ReasonSessionEnded {
			t.Errorf("%s %s: condition %v, want status False, reason %s", u.GetKind(), u.GetName(), m, dev.ReasonSessionEnded)
		}
	}
	for _, f := range urlFields {
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", f); ok {
			t.Errorf("%s %s: status.%s = %v is still there", u.GetKind(), u.GetName(), f, v)
		}
	}
}

// TestStopMarksWhatItMadeReady: after Stop, the Knative Service and the
// sources opzero dev had made Ready are Ready=False (DevSessionEnded) and
// hold none of the session's local URLs.
func TestStopMarksWhatItMadeReady(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	p := start(t, env, fixture(t, ns), 0)
	svc := get(t, env.Client, "serving.knative.dev/v1", "Service", ns, "configwatcher")
	if url, _, _ := unstructured.NestedString(svc.Object, "status", "url"); !condReady(svc) || url != p.Services[0].URL {
		t.Fatalf("while dev runs: Service ready %v, url %q; want ready at %s", condReady(svc), url, p.Services[0].URL)
	}
	p.Stop()
	endedCheck(t, get(t, env.Client, "serving.knative.dev/v1", "Service", ns, "configwatcher"), "url", "address")
	endedCheck(t, get(t, env.Client, "sources.knative.dev/v1", "ApiServerSource", ns, "configwatcher"), "sinkUri")
	endedCheck(t, get(t, env.Client, "sources.knative.dev/v1", "PingSource", ns, "configwatcher-sweep"), "sinkUri")
}

// TestFailedStartLeavesNothingReady: a start that fails after the Service
// was made Ready (here: Knative's adapter is not in --bin-dir) leaves it
// not ready, with no URL, and says what to do.
func TestFailedStartLeavesNothingReady(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	_, err = dev.Start(context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: fixture(t, ns), Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, BinDir: empty, Out: testkit.LogWriter(t)})
	if err == nil || !strings.Contains(err.Error(), "apiserver_receive_adapter not found in --bin-dir "+empty) || !strings.Contains(err.Error(), "opzero install") {
		t.Fatalf("Start with an empty --bin-dir: %v, want an error naming the adapter, the folder and opzero install", err)
	}
	endedCheck(t, get(t, env.Client, "serving.knative.dev/v1", "Service", ns, "configwatcher"), "url", "address")
}
