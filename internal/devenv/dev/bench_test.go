package dev_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// BenchmarkDevColdStart measures 10 cold starts through opzero dev, each
// from 0 instances: a ConfigMap change -> Knative's ApiServerSource adapter
// -> the activator starts the ConfigWatcher (exec, /healthz) -> the first
// reconcile writes the ConfigWatcher's status. It prints every run and the
// medians of
//
//	change -> status   the ConfigMap update until the new status is read back
//	request -> answer  the activator's first request of the cold start until
//	                   its answer: exec, ready, reconcile (no adapter, no poll)
//
// Run it with: go test -run '^$' -bench DevColdStart -benchtime 1x ./devenv/dev
func BenchmarkDevColdStart(b *testing.B) {
	const runs = 10
	env := testenv.Get(b)
	ns := env.Namespace(b)
	c := env.Client
	ctx := context.Background()
	createWebapp(b, c, ns)
	p := start(b, env, fixture(b, ns), 300*time.Millisecond)
	svc := p.Services[0]
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config-watcher", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}}
	if err := c.Create(ctx, cw); err != nil {
		b.Fatal(err)
	}
	testkit.Eventually(b, 30*time.Second, "first reconcile", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(cw), cw) == nil && cw.Status.ConfigMapVersion != "", nil
	})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var toStatus, toAnswer []time.Duration
		for r := range runs {
			waitZero(b, p)
			seen := len(svc.Deliveries())
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webapp-config"}, cm); err != nil {
				b.Fatal(err)
			}
			cm.Data["message"] = fmt.Sprintf("run %d.%d", i, r)
			t0 := time.Now()
			if err := c.Update(ctx, cm); err != nil {
				b.Fatal(err)
			}
			if err := pollFast(func() bool {
				return c.Get(ctx, client.ObjectKeyFromObject(cw), cw) == nil && cw.Status.ConfigMapVersion == cm.ResourceVersion
			}); err != nil {
				b.Fatal("status not updated:", err)
			}
			toStatus = append(toStatus, time.Since(t0))
			// The answer is recorded just after the status is written.
			var first dev.Delivery
			if err := pollFast(func() bool {
				for _, d := range svc.Deliveries()[seen:] {
					if d.Kind == "ConfigMap" {
						first = d
						return true
					}
				}
				return false
			}); err != nil {
				b.Fatal("the ConfigMap event's answer was not recorded:", err)
			}
			toAnswer = append(toAnswer, first.Took)
			fmt.Printf("  cold start %2d: change -> status %6s   request -> answer %6s\n", r+1, toStatus[r].Round(time.Millisecond), first.Took.Round(time.Millisecond))
		}
		ms, ma := median(toStatus), median(toAnswer)
		fmt.Printf("opzero dev cold start, median of %d: change -> status %s, request -> answer %s (cold starts %d)\n",
			runs, ms.Round(time.Millisecond), ma.Round(time.Millisecond), svc.Activator.ColdStarts.Load())
		b.ReportMetric(float64(ms.Microseconds())/1000, "ms-change-to-status")
		b.ReportMetric(float64(ma.Microseconds())/1000, "ms-request-to-answer")
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return (s[len(s)/2] + s[(len(s)-1)/2]) / 2
}

func pollFast(cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within 30s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}
