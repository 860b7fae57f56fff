package wakeup_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

// startClient counts the Source's lists of every record (no due-bucket
// selector) and its watches that ask for initial events; with refuse it
// answers those watches as an API server without WatchList does.
type startClient struct {
	client.WithWatch
	refuse bool

	mu                        sync.Mutex
	fullLists, initialWatches int
}

func (c *startClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.Raw == nil || !strings.Contains(o.Raw.LabelSelector, wakeup.DueBucketLabel) {
		c.mu.Lock()
		c.fullLists++
		c.mu.Unlock()
	}
	return c.WithWatch.List(ctx, list, opts...)
}

func (c *startClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.Raw != nil && o.Raw.SendInitialEvents != nil {
		if c.refuse { // what kube-apiserver 1.33 answers (handlers/get.go)
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", field.ErrorList{
				field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")})
		}
		c.mu.Lock()
		c.initialWatches++
		c.mu.Unlock()
	}
	return c.WithWatch.Watch(ctx, list, opts...)
}

// TestSourceStart: a Source starting with records that fell due while no
// source ran (in many past due buckets, more than its window of 16), an
// overdue stray, records due soon and later, on the real API server with a
// fake clock. It reads them from a watch's initial events, not by listing
// every record (with the paged start it lists them page by page); against
// a server that refuses initial events it falls back to the paged lists.
// Either way the overdue records fire with the clock standing still, then
// every other one as the clock passes its due time: each once, in due
// order (the overdue stray, due first, first), none early, and deleted.
func TestSourceStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse bool
	}{{"initial events", false}, {"refused: paged", true}} {
		t.Run(tc.name, func(t *testing.T) { testSourceStart(t, tc.refuse) })
	}
}

func testSourceStart(t *testing.T, refuse bool) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(t0)

	rec, sink := newDueSink(t, clk)
	create := func(name string, at time.Time, labeled bool) {
		t.Helper()
		rec.due[name] = at
		w := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-" + name, Labels: map[string]string{wakeup.OperatorLabel: "start"}},
			Spec: v1alpha1.WakeupSpec{Operator: "start", Sink: sink.URL, Due: metav1.NewMicroTime(at), Reason: v1alpha1.ReasonRequeueAfter,
				Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: ns, Name: name}}}
		if labeled {
			w.Labels[wakeup.DueBucketLabel] = wakeup.DueBucket(at)
		}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	// Names in another order than due times: a list comes in name order.
	for i := range 25 {
		create(fmt.Sprintf("o%02d", 24-i), t0.Add(-2*time.Hour+time.Duration(i)*4*time.Minute+250*time.Millisecond), true)
	}
	create("stray-overdue", t0.Add(-3*time.Hour), false)
	create("stray-soon", t0.Add(20500*time.Millisecond), false)
	for i := range 10 {
		create(fmt.Sprintf("s%02d", 9-i), t0.Add(5*time.Second+time.Duration(i)*time.Second+500*time.Millisecond), true)
	}
	for i := range 5 {
		create(fmt.Sprintf("l%02d", i), t0.Add(10*time.Minute+time.Duration(i)*time.Second+500*time.Millisecond), true)
	}

	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	c := &startClient{WithWatch: base, refuse: refuse}
	src := wakeup.NewSource(c, wakeup.SourceOptions{Namespace: ns, Operator: "start", Concurrency: 1, Clock: clk, Window: 16, PageSize: 3})
	testkit.Background(t, src.Run)
	testkit.Eventually(t, 30*time.Second, "the source read the records", func(context.Context) (bool, error) { return src.Synced(), nil })
	c.mu.Lock()
	fullLists, initialWatches := c.fullLists, c.initialWatches
	c.mu.Unlock()
	if !refuse && (fullLists != 0 || initialWatches != 1) {
		t.Errorf("start: %d lists of every record, %d watches with initial events; want 0 and 1", fullLists, initialWatches)
	}
	if refuse && fullLists < len(rec.due)/3 {
		t.Errorf("start on a server without WatchList: %d lists of every record (pages of 3), want %d or more", fullLists, len(rec.due)/3)
	}

	// The overdue records fire with the clock standing still (past due
	// buckets are read a group at a time once the window has room).
	if err := testkit.Poll(ctx, 30*time.Second, func(context.Context) (bool, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.order) >= 26, nil
	}); err != nil {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		t.Fatalf("the overdue records delivered: %v; delivered %v, %d held", err, rec.order, src.Held())
	}
	for clk.Now().Before(t0.Add(11 * time.Minute)) {
		clk.Step(time.Second)
		time.Sleep(15 * time.Millisecond) // the pace of the fake clock, not a wait for an outcome
	}
	testkit.Eventually(t, time.Minute, "every record delivered", func(context.Context) (bool, error) {
		clk.Step(time.Second)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.order) >= len(rec.due), nil
	})
	testkit.Eventually(t, 30*time.Second, "every record deleted", func(ctx context.Context) (bool, error) {
		list := &v1alpha1.WakeupList{}
		err := env.Client.List(ctx, list, client.InNamespace(ns))
		return err == nil && len(list.Items) == 0, err
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.early != 0 {
		t.Errorf("%d deliveries before their due time", rec.early)
	}
	for name, n := range rec.count {
		if n != 1 {
			t.Errorf("%s delivered %d times", name, n)
		}
	}
	if rec.order[0] != "stray-overdue" || !slices.IsSortedFunc(rec.order, func(a, b string) int { return rec.due[a].Compare(rec.due[b]) }) {
		t.Errorf("delivered out of due order: %v", rec.order)
	}
}
