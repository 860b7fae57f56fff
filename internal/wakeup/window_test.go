package wakeup_test

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

// TestSourceWindow: a Source holding at most 40 records, over 300 pending
// ones spread across 5 minutes (written by the Store, so labeled by due
// bucket) and 4 strays (one without the label, one whose label disagrees
// with its due time, two far ahead), on the real API server, with a fake
// clock stepped one second at a time. More records are written and some
// deleted while it runs. Every record is delivered once, in due order,
// none before its due time, the deleted ones never, every delivered record
// is deleted, and the Source never holds more than its window and the
// strays.
func TestSourceWindow(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(t0)

	rec, sink := newDueSink(t, clk)
	store := wakeup.NewStore(env.Client, wakeup.StoreOptions{Operator: "win", Target: v1.GroupVersion.WithKind("ConfigWatcher"),
		Sink: sink.URL, Policy: backoff.DefaultPolicy(), Clock: clk})
	requeue := func(name string, d time.Duration) {
		t.Helper()
		rec.mu.Lock()
		rec.due[name] = clk.Now().Add(d)
		rec.mu.Unlock()
		if err := store.Requeue(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range rand.Perm(300) {
		requeue(fmt.Sprintf("r%03d", i), 5*time.Second+time.Duration(i)*time.Second)
	}
	stray := func(name string, d time.Duration, label string) {
		t.Helper()
		at := t0.Add(d)
		rec.mu.Lock()
		rec.due[name] = at
		rec.mu.Unlock()
		w := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stray-" + name, Labels: map[string]string{wakeup.OperatorLabel: "win"}},
			Spec: v1alpha1.WakeupSpec{Operator: "win", Sink: sink.URL, Due: metav1.NewMicroTime(at), Reason: v1alpha1.ReasonRequeueAfter,
				Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: ns, Name: name}}}
		if label != "" {
			w.Labels[wakeup.DueBucketLabel] = label
		}
		if err := env.Client.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	stray("s-unlabeled", 30500*time.Millisecond, "")
	stray("s-mislabeled", 50500*time.Millisecond, wakeup.DueBucket(t0.Add(1000*time.Second)))
	stray("s-far", 10*time.Minute+500*time.Millisecond, "")
	stray("s-later", 200500*time.Millisecond, "")

	// A delivery that failed (a connection error on a loaded machine) is
	// retried after a backoff: such a record may come later than its turn.
	retried := map[string]bool{} // record name
	failures := funcr.New(func(_, args string) {
		if _, after, ok := strings.Cut(args, `"wakeup"="`); ok {
			name, _, _ := strings.Cut(after, `"`)
			rec.mu.Lock()
			retried[name[strings.Index(name, "/")+1:]] = true
			rec.mu.Unlock()
			t.Logf("delivery failed, retried: %s", args)
		}
	}, funcr.Options{})
	const window = 40
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	src := wakeup.NewSource(c, wakeup.SourceOptions{Namespace: ns, Operator: "win", Concurrency: 1, Clock: clk, Window: window, PageSize: 7, Log: failures})
	testkit.Background(t, src.Run)
	testkit.Eventually(t, 30*time.Second, "the source listed the records", func(context.Context) (bool, error) { return src.Synced(), nil })

	deleted := map[string]bool{}
	maxHeld := 0
	step := func(until time.Time) {
		for clk.Now().Before(until) {
			clk.Step(time.Second)
			time.Sleep(15 * time.Millisecond) // the pace of the fake clock, not a wait for an outcome
			maxHeld = max(maxHeld, src.Held())
		}
	}
	step(t0.Add(60 * time.Second))
	// While it runs: records due inside the window and beyond it, and
	// deletions of pending ones, each at least a minute ahead of the clock.
	for i := range 20 {
		requeue(fmt.Sprintf("n%03d", i), 60*time.Second+time.Duration(i)*time.Second+250*time.Millisecond)
		requeue(fmt.Sprintf("m%03d", i), 340*time.Second+time.Duration(i)*time.Second+250*time.Millisecond)
	}
	for i := 200; i < 210; i++ {
		name := fmt.Sprintf("r%03d", i)
		w := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: wakeup.Name("win", types.NamespacedName{Namespace: ns, Name: name})}}
		if err := env.Client.Delete(ctx, w); err != nil {
			t.Fatal(err)
		}
		deleted[name] = true
	}
	// The clock goes on only once the Source's watch has brought it these
	// writes (a record's last, then the sentinel's): records due a minute
	// ahead are 60 steps, under a second, away, and on a loaded machine
	// the watch may take longer than that; the Source is to deliver in due
	// order what it knows of in time.
	sentinel := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentinel",
		Labels: map[string]string{wakeup.OperatorLabel: "win", wakeup.DueBucketLabel: wakeup.DueBucket(t0.Add(time.Hour))}}, // beyond the window: never held
		Spec: v1alpha1.WakeupSpec{Operator: "win", Sink: sink.URL, Due: metav1.NewMicroTime(t0.Add(time.Hour)), Reason: v1alpha1.ReasonRequeueAfter,
			Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: ns, Name: "sentinel"}}}
	if err := env.Client.Create(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the source's watch brought the writes", func(context.Context) (bool, error) {
		return src.Seen(sentinel.ResourceVersion), nil
	})
	if err := env.Client.Delete(ctx, sentinel); err != nil {
		t.Fatal(err)
	}
	step(t0.Add(11 * time.Minute))
	want := len(rec.due) - len(deleted)
	testkit.Eventually(t, time.Minute, "every record delivered", func(context.Context) (bool, error) {
		clk.Step(time.Second) // in case the source set a timer just before a step
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.order) >= want, nil
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
		if n != 1 || deleted[name] {
			t.Errorf("%s delivered %d times (deleted before its due time: %v)", name, n, deleted[name])
		}
	}
	var inOrder []string // the deliveries of records delivered at the first attempt
	for _, name := range rec.order {
		if !retried[wakeup.Name("win", types.NamespacedName{Namespace: ns, Name: name})] && !retried["stray-"+name] {
			inOrder = append(inOrder, name)
		}
	}
	if !slices.IsSortedFunc(inOrder, func(a, b string) int { return rec.due[a].Compare(rec.due[b]) }) {
		t.Errorf("delivered out of due order: %v", inOrder)
	}
	if len(retried) > len(rec.order)/10 {
		t.Errorf("%d of %d deliveries failed at first", len(retried), len(rec.order))
	}
	if limit := window + window/8 + 4; maxHeld > limit {
		t.Errorf("the source held %d records at once, want at most %d (window %d, 4 strays)", maxHeld, limit, window)
	}
	t.Logf("%d delivered in due order; at most %d held", len(rec.order), maxHeld)
}

// dueSink is a wakeup sink that records, under mu, each target's first
// arrival in order, how often each arrived, and arrivals before the due
// time the test set in due (target name -> due), on clk.
type dueSink struct {
	mu    sync.Mutex
	due   map[string]time.Time
	order []string
	count map[string]int
	early int
}

func newDueSink(t *testing.T, clk clock.PassiveClock) (*dueSink, *httptest.Server) {
	rec := &dueSink{due: map[string]time.Time{}, count: map[string]int{}}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Header.Get("Ce-Targetname")
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if clk.Now().Before(rec.due[name]) {
			rec.early++
		}
		if rec.count[name] == 0 {
			rec.order = append(rec.order, name)
		}
		rec.count[name]++
	}))
	t.Cleanup(sink.Close)
	return rec, sink
}
