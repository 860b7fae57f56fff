package backoff_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/backoff"
)

var epoch = time.Unix(1_000_000, 0)

// fires records the calls of a Tracker's fire function with the fake time.
type fires struct {
	clock *backoff.FakeClock
	mu    sync.Mutex
	at    map[string][]time.Duration // since epoch
}

func newFires(c *backoff.FakeClock) *fires { return &fires{clock: c, at: map[string][]time.Duration{}} }

func (f *fires) fire(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at[key] = append(f.at[key], f.clock.Now().Sub(epoch))
}

func (f *fires) of(key string) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.at[key]...)
}

// TestFailureSequence: consecutive failures, each retried when due, follow
// the policy: base, 2x, 4x, then capped.
func TestFailureSequence(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	f := newFires(clock)
	tr := backoff.NewTracker(backoff.Policy{Base: time.Second, Cap: 8 * time.Second}, clock, f.fire)
	var elapsed time.Duration
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		want *= time.Second
		d, attempt := tr.Failure("k")
		if d != want || attempt != i {
			t.Fatalf("failure %d: Failure = (%s, %d), want (%s, %d)", i, d, attempt, want, i)
		}
		if due, ok := tr.Pending("k"); !ok || !due.Equal(epoch.Add(elapsed+want)) {
			t.Fatalf("failure %d: Pending = %v %v, want due at +%s", i, due, ok, elapsed+want)
		}
		clock.Step(want - time.Nanosecond)
		if n := len(f.of("k")); n != i {
			t.Fatalf("failure %d: retry fired before its delay", i)
		}
		clock.Step(time.Nanosecond)
		elapsed += want
		if got := f.of("k"); len(got) != i+1 || got[i] != elapsed {
			t.Fatalf("failure %d: fires at %v, want the last at %s", i, got, elapsed)
		}
		if _, ok := tr.Pending("k"); ok {
			t.Fatalf("failure %d: a timer entry survived its firing", i)
		}
	}
	if n := tr.Attempts("k"); n != 6 {
		t.Fatalf("Attempts = %d, want 6 (kept until Success)", n)
	}
}

// TestEarliestWins: of all the requests for one key, the earliest due time
// fires, once.
func TestEarliestWins(t *testing.T) {
	type op struct {
		failure bool          // Failure (policy: 1s, 2s, ...), else After(d)
		d       time.Duration // for After
	}
	fail := op{failure: true}
	after := func(d time.Duration) op { return op{d: d} }
	tests := []struct {
		name string
		ops  []op
		want time.Duration
	}{
		{"an earlier failure replaces a later requeue", []op{after(10 * time.Second), fail}, time.Second},
		{"a later requeue keeps an earlier failure", []op{fail, after(10 * time.Second)}, time.Second},
		{"a second failure keeps the first's earlier retry", []op{fail, fail}, time.Second},
		{"the shorter of two requeues", []op{after(5 * time.Second), after(3 * time.Second)}, 3 * time.Second},
		{"a longer requeue changes nothing", []op{after(3 * time.Second), after(5 * time.Second)}, 3 * time.Second},
		{"equal due times", []op{after(2 * time.Second), after(2 * time.Second)}, 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := backoff.NewFakeClock(epoch)
			f := newFires(clock)
			tr := backoff.NewTracker(backoff.Policy{Base: time.Second, Cap: time.Minute}, clock, f.fire)
			for _, o := range tc.ops {
				if o.failure {
					tr.Failure("k")
				} else {
					tr.After("k", o.d)
				}
			}
			if due, ok := tr.Pending("k"); !ok || !due.Equal(epoch.Add(tc.want)) {
				t.Fatalf("Pending = %v %v, want +%s", due.Sub(epoch), ok, tc.want)
			}
			if n := clock.Timers(); n != 1 {
				t.Fatalf("%d timers on the clock, want 1 (the replaced one stopped)", n)
			}
			clock.Step(tc.want)
			clock.Step(time.Hour)
			if got := f.of("k"); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("fired at %v, want once at %s", got, tc.want)
			}
		})
	}
}

// TestFailureReportsEarlierTimer: when an earlier timer wins, Failure returns
// the time until it fires, not the policy's longer delay.
func TestFailureReportsEarlierTimer(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	tr := backoff.NewTracker(backoff.Policy{Base: 4 * time.Second}, clock, func(string) {})
	tr.After("k", 3*time.Second)
	clock.Step(time.Second)
	if d, attempt := tr.Failure("k"); d != 2*time.Second || attempt != 0 {
		t.Fatalf("Failure = (%s, %d), want (2s, 0): the requeue due in 2s wins", d, attempt)
	}
}

// TestSuccessForgets: Success cancels a pending retry and forgets the key.
func TestSuccessForgets(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	f := newFires(clock)
	tr := backoff.NewTracker(backoff.Policy{}, clock, f.fire)
	tr.Failure("k")
	tr.Failure("k")
	tr.After("other", time.Minute)
	tr.Success("k")
	if _, ok := tr.Pending("k"); ok || tr.Attempts("k") != 0 {
		t.Fatal("Success left a timer or a count behind")
	}
	clock.Step(24 * time.Hour)
	if got := f.of("k"); len(got) != 0 {
		t.Fatalf("fire called at %v after Success", got)
	}
	if got := f.of("other"); len(got) != 1 {
		t.Fatalf("another key's timer fired %d times, want 1", len(got))
	}
	if d, attempt := tr.Failure("k"); d != time.Second || attempt != 0 {
		t.Fatalf("after Success, Failure = (%s, %d), want a fresh start (1s, 0)", d, attempt)
	}
	tr.Success("k")
	tr.Success("other")
	if n, timers := tr.Len(), clock.Timers(); n != 0 || timers != 0 {
		t.Fatalf("after Success of every key: Len = %d, clock timers = %d, want 0 0", n, timers)
	}
}

// TestStop: Stop cancels every timer, and nothing is scheduled afterwards.
func TestStop(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	f := newFires(clock)
	tr := backoff.NewTracker(backoff.Policy{}, clock, f.fire)
	tr.Failure("a")
	tr.After("b", time.Second)
	tr.Stop()
	tr.Failure("c")
	tr.After("d", time.Second)
	clock.Step(time.Hour)
	for _, k := range []string{"a", "b", "c", "d"} {
		if got := f.of(k); len(got) != 0 {
			t.Errorf("%s fired after Stop", k)
		}
	}
	if n := clock.Timers(); n != 0 {
		t.Fatalf("%d timers left on the clock after Stop", n)
	}
}

// TestFireReenters: fire may call the Tracker; a timer it schedules that is
// already due fires in the same Step.
func TestFireReenters(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	var tr *backoff.Tracker[string]
	f := newFires(clock)
	tr = backoff.NewTracker(backoff.Policy{Base: time.Second, Cap: time.Minute}, clock, func(k string) {
		f.fire(k)
		tr.Failure(k) // the retry failed again
	})
	tr.Failure("k")
	clock.Step(7 * time.Second) // due at 1s, then 1+2=3s, then 3+4=7s
	if got := f.of("k"); len(got) != 3 {
		t.Fatalf("fired %d times within 7s, want 3 (1s, 3s, 7s)", len(got))
	}
	if due, _ := tr.Pending("k"); !due.Equal(epoch.Add(15 * time.Second)) {
		t.Fatalf("next retry due at +%s, want +15s", due.Sub(epoch))
	}
}

// TestConcurrent: many goroutines use one Tracker while the clock is stepped
// (run with -race). Afterwards no key is left behind.
func TestConcurrent(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	var fired atomic.Int64
	tr := backoff.NewTracker(backoff.Policy{Base: time.Millisecond, Cap: time.Second, Jitter: 0.5}, clock, func(string) { fired.Add(1) })
	stop := make(chan struct{})
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		for {
			select {
			case <-stop:
				return
			default:
				clock.Step(time.Millisecond)
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				k := fmt.Sprint("key", (w+i)%5)
				switch i % 4 {
				case 0, 1:
					tr.Failure(k)
				case 2:
					tr.After(k, time.Duration(i)*time.Microsecond)
				default:
					tr.Success(k)
				}
				tr.Pending(k)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-stepped
	clock.Step(time.Hour)
	if fired.Load() == 0 {
		t.Fatal("no timer ever fired")
	}
	for i := range 5 {
		tr.Success(fmt.Sprint("key", i))
	}
	if n, timers := tr.Len(), clock.Timers(); n != 0 || timers != 0 {
		t.Fatalf("Len = %d, clock timers = %d, want 0 0", n, timers)
	}
}

// TestRealClock: the wall clock fires (no timing is asserted).
func TestRealClock(t *testing.T) {
	fired := make(chan string, 1)
	tr := backoff.NewTracker(backoff.Policy{Base: time.Millisecond}, nil, func(k string) { fired <- k })
	defer tr.Stop()
	tr.Failure("k")
	select {
	case k := <-fired:
		if k != "k" {
			t.Fatalf("fired %q", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the real clock never fired")
	}
}

// TestFailuresBeforeTheRetryDoNotCount: failures while a retry is pending
// (the reconciles of events that came before it was due, such as the echo
// of the failed reconcile's own status write) leave the backoff and the
// pending retry as they are; the retry's own failure counts.
func TestFailuresBeforeTheRetryDoNotCount(t *testing.T) {
	clock := backoff.NewFakeClock(epoch)
	f := newFires(clock)
	tr := backoff.NewTracker(backoff.Policy{Base: time.Second, Cap: time.Minute}, clock, f.fire)
	tr.Failure("k") // attempt 0: retry at +1s
	for range 5 {
		clock.Step(100 * time.Millisecond)
		tr.Failure("k")
	}
	if n := tr.Attempts("k"); n != 1 {
		t.Fatalf("Attempts = %d after one failure and five before its retry, want 1", n)
	}
	if due, ok := tr.Pending("k"); !ok || !due.Equal(epoch.Add(time.Second)) {
		t.Fatalf("Pending = %v %v, want the first retry at +1s", due.Sub(epoch), ok)
	}
	clock.Step(500 * time.Millisecond) // the retry fires
	if got := f.of("k"); len(got) != 1 {
		t.Fatalf("fires %v, want the retry once", got)
	}
	if d, attempt := tr.Failure("k"); d != 2*time.Second || attempt != 1 {
		t.Fatalf("the retry's failure: Failure = (%s, %d), want (2s, 1)", d, attempt)
	}
}
