package wakeup_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
	"github.com/opzero/opzero/testenv"
)

// TestNoRouteIsNotBackedOff: a due Wakeup whose Route has nowhere to send
// it (ErrNoRoute: the hub's Subscription not Ready again after a restart)
// for 40 s of the fake clock is sent within NoRouteRetryMax of its route
// coming back, not after a backoff grown by every try (1 s doubling: the
// try after 40 s of failures comes up to 32 s later), and is tried every
// NoRouteRetryMax at most meanwhile. A Route that fails otherwise still
// backs off: tried about log2(40) times.
func TestNoRouteIsNotBackedOff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noRoute bool
	}{{"no route", true}, {"route failing", false}} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Get(t)
			ns := env.Namespace(t)
			ctx := context.Background()
			t0 := time.Now().Truncate(time.Second)
			clk := clocktesting.NewFakeClock(t0)
			rec, sink := newDueSink(t, clk)
			rec.due["x"] = t0
			w := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-x", Labels: map[string]string{wakeup.OperatorLabel: "route", wakeup.DueBucketLabel: wakeup.DueBucket(t0)}},
				Spec: v1alpha1.WakeupSpec{Operator: "route", Sink: sink.URL, Due: metav1.NewMicroTime(t0), Reason: v1alpha1.ReasonRequeueAfter,
					Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: ns, Name: "x"}}}
			if err := env.Client.Create(ctx, w); err != nil {
				t.Fatal(err)
			}
			var routed, tries atomic.Int64
			route := func(context.Context, string, string, string) (string, string, error) {
				tries.Add(1)
				if routed.Load() == 0 {
					if tc.noRoute {
						return "", "", fmt.Errorf("no Ready Subscription yet: %w", wakesource.ErrNoRoute)
					}
					return "", "", fmt.Errorf("minting a token failed")
				}
				return sink.URL, "", nil
			}
			c, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
			if err != nil {
				t.Fatal(err)
			}
			src := wakeup.NewSource(c, wakeup.SourceOptions{Namespace: ns, Operator: "route", Concurrency: 1, Clock: clk, Route: route})
			testkit.Background(t, src.Run)
			testkit.Eventually(t, 30*time.Second, "the source read the record", func(context.Context) (bool, error) { return src.Synced(), nil })

			// 40 s of the clock without a route, in steps the source keeps
			// up with (each step waits until it has tried what fell due).
			for clk.Now().Before(t0.Add(40 * time.Second)) {
				clk.Step(250 * time.Millisecond)
				time.Sleep(5 * time.Millisecond) // the pace of the fake clock, not a wait for an outcome
			}
			failed := tries.Load()
			routed.Store(1)
			back := clk.Now()
			delivered := func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return rec.count["x"] > 0
			}
			for !delivered() && clk.Now().Before(back.Add(40*time.Second)) {
				clk.Step(100 * time.Millisecond)
				time.Sleep(10 * time.Millisecond)
			}
			took := clk.Now().Sub(back)
			t.Logf("%s: %d tries in the 40 s without a route; delivered %s (clock) after the route came back", tc.name, failed, took)
			if !delivered() {
				t.Fatalf("not delivered within 40 s (clock) of the route coming back")
			}
			if tc.noRoute {
				if took > wakesource.NoRouteRetryMax+200*time.Millisecond {
					t.Errorf("delivered %s (clock) after the route came back, want within %s: backed off", took, wakesource.NoRouteRetryMax)
				}
				if least := int64(40 * time.Second / wakesource.NoRouteRetryMax); failed < least {
					t.Errorf("%d tries in 40 s without a route, want at least %d (one per %s at most)", failed, least, wakesource.NoRouteRetryMax)
				}
			} else if failed > 10 {
				t.Errorf("%d tries in 40 s of a failing route, want a backoff (1 s doubling: about 6)", failed)
			}
		})
	}
}
