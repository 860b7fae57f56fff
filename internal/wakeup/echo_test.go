package wakeup_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

// TestFailuresBeforeTheRetry (real API server): failures recorded while a
// retry is pending (the reconciles of events that came first, such as the
// echo of the failed reconcile's own status write) leave the record as it
// is: its attempts and its due time; the retry's own failure, at its due
// time, counts and doubles the delay.
func TestFailuresBeforeTheRetry(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	opts := wakeup.StoreOptions{Operator: "echo-" + ns, Target: v1.GroupVersion.WithKind("ConfigWatcher"),
		Sink: "http://unused", Policy: backoff.Policy{Base: 10 * time.Second, Cap: 5 * time.Minute, Factor: 2}, Clock: clk}
	s := wakeup.NewStore(env.Client, opts)
	k := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "w"}}
	record := func() *v1alpha1.Wakeup {
		t.Helper()
		w := &v1alpha1.Wakeup{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: wakeup.Name(opts.Operator, k.NamespacedName)}, w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	if d, attempt, err := s.Failed(ctx, k); err != nil || d != 10*time.Second || attempt != 0 {
		t.Fatalf("first failure: %s, %d, %v; want 10s, attempt 0", d, attempt, err)
	}
	first := record()
	for range 5 {
		clk.SetTime(clk.Now().Add(time.Second))
		if d, _, err := s.Failed(ctx, k); err != nil || d >= 10*time.Second {
			t.Fatalf("a failure before the retry: %s, %v; want the pending retry's remaining time", d, err)
		}
	}
	if w := record(); w.Spec.Attempts != 1 || !w.Spec.Due.Equal(&first.Spec.Due) || w.ResourceVersion != first.ResourceVersion {
		t.Fatalf("after five failures before the retry: attempts %d, due %v (was %v), written again: %v; want it untouched",
			w.Spec.Attempts, w.Spec.Due, first.Spec.Due, w.ResourceVersion != first.ResourceVersion)
	}
	clk.SetTime(first.Spec.Due.Time)
	if d, attempt, err := s.Failed(ctx, k); err != nil || d != 20*time.Second || attempt != 1 {
		t.Fatalf("the retry's own failure: %s, %d, %v; want 20s, attempt 1", d, attempt, err)
	}
	if w := record(); w.Spec.Attempts != 2 {
		t.Fatalf("attempts %d after the retry failed, want 2", w.Spec.Attempts)
	}
}
