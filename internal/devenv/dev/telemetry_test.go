package dev_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/devenv/otelcol"
	"github.com/opzero/opzero/internal/devenv/pinned"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestTelemetryThroughDev: a ConfigWatcher created, updated and deleted
// through opzero dev, scaled to zero after each event, with the operator
// pointed at a real collector (the Collector's OTLP receiver) as
// `opzero dev --otel` does. Metrics and spans are exported only on drain
// (export interval and batch delay of an hour), so what the collector holds
// is what each instance pushed as it scaled to zero: every instance's
// metrics arrived (one cold start each), reconcile_total by result, and
// each event is one trace linking intake -> reconcile -> API calls.
func TestTelemetryThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, Knative's adapters and a collector")
	}
	ctx := context.Background()
	bin, err := pinned.Resolver{}.FindOne(ctx, pinned.OTLPReceiver)
	if err != nil {
		t.Fatal(err)
	}
	col, err := otelcol.Start(ctx, bin, t.TempDir(), testkit.LogWriter(t))
	if err != nil {
		t.Fatal(err)
	}
	defer col.Stop()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	c := env.Client
	createWebapp(t, c, ns)
	p := startWithEnv(t, env, fixture(t, ns), append(col.Env(time.Hour), "OTEL_BSP_SCHEDULE_DELAY=3600000"))
	svc := p.Services[0]

	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config-watcher", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}}
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "ConfigWatcher reconciled", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(cw), cw) == nil && cw.Status.ConfigMapVersion != "", nil
	})
	waitZero(t, p)
	n := reconciledDeliveries(p, "update ConfigWatcher")
	cw.Spec.PodSelector = map[string]string{"app": "webapp", "tier": "web"}
	if err := c.Update(ctx, cw); err != nil {
		t.Fatal(err)
	}
	delivered(t, p, "update ConfigWatcher", n)
	waitZero(t, p)
	n = reconciledDeliveries(p, "delete ConfigWatcher")
	if err := c.Delete(ctx, cw); err != nil {
		t.Fatal(err)
	}
	delivered(t, p, "delete ConfigWatcher", n)
	waitZero(t, p)
	p.Stop()
	col.Stop()

	data, err := otelcol.Read(col.Dir)
	if err != nil {
		t.Fatal(err)
	}
	cold := svc.Activator.ColdStarts.Load()
	if cold < 3 {
		t.Fatalf("%d cold starts, want at least 3 (scale to zero between the events)", cold)
	}
	ctrl := map[string]string{"controller": "configwatcher"}
	if got := data.Latest("opzero_cold_starts_total", ctrl); got != float64(cold) {
		t.Errorf("opzero_cold_starts_total %v in the collector, want %d: an instance's push on drain was lost", got, cold)
	}
	if got := len(data.Instances("controller_runtime_reconcile_total")); got != int(cold) {
		t.Errorf("%d instances pushed controller_runtime_reconcile_total, want %d (one per cold start)", got, cold)
	}
	if got := data.Latest("controller_runtime_reconcile_total", map[string]string{"controller": "configwatcher", "result": "success"}); got < 3 {
		t.Errorf("controller_runtime_reconcile_total{result=success} %v, want >= 3 (create, update, delete)", got)
	}
	if got := data.Latest("opzero_cold_start_first_reconcile_seconds", ctrl); got <= 0 {
		t.Errorf("opzero_cold_start_first_reconcile_seconds %v, want > 0", got)
	}

	traces := map[string]bool{}
	for _, s := range data.Spans {
		if strings.HasPrefix(s.Name, "intake ") {
			if traces[s.TraceID] {
				t.Errorf("two deliveries in trace %s: want one trace per event", s.TraceID)
			}
			traces[s.TraceID] = true
		}
	}
	for _, reason := range []string{"create ConfigWatcher", "update ConfigWatcher", "delete ConfigWatcher"} {
		checkTrace(t, data, "intake "+reason)
	}
}

// checkTrace: a span named intake exists with a reconcile child that has
// an API call child (other deliveries of that name, such as a skipped
// status update, may have none).
func checkTrace(t *testing.T, data *otelcol.Data, intake string) {
	t.Helper()
	var seen []string
	for _, in := range data.Spans {
		if in.Name != intake {
			continue
		}
		spans := data.Trace(in.TraceID)
		for _, r := range spans {
			if r.Name != "reconcile" || r.ParentSpanID != in.SpanID {
				continue
			}
			for _, call := range spans {
				if call.ParentSpanID == r.SpanID && call.Attrs["http.request.method"] != "" {
					return
				}
			}
		}
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		seen = append(seen, in.TraceID+": "+strings.Join(names, ", "))
	}
	t.Errorf("no trace links %q -> reconcile -> an API call; traces with that intake:\n%s", intake, strings.Join(seen, "\n"))
}

// delivered waits for more than n of the operator's log lines of a
// reconciled delivery with reason.
func delivered(t *testing.T, p *dev.Platform, reason string, n int) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "a delivery "+reason, func(context.Context) (bool, error) {
		return reconciledDeliveries(p, reason) > n, nil
	})
}

// reconciledDeliveries counts the delivery lines with reason that ran a reconcile.
func reconciledDeliveries(p *dev.Platform, reason string) int {
	logs, _ := filepath.Glob(p.LogPath("service-*"))
	n := 0
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, `"msg":"delivery"`) && strings.Contains(line, `"reason":`+strconv.Quote(reason)) && !strings.Contains(line, `"reconciles":0`) {
				n++
			}
		}
	}
	return n
}

// startWithEnv is start with Options.Env.
func startWithEnv(t *testing.T, env *testenv.Env, objs []*unstructured.Unstructured, extra []string) *dev.Platform {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return devtest.Start(t, context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, Idle: time.Second, Env: extra})
}
