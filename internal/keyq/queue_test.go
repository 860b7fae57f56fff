package keyq_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/keyq"
)

// hang bounds every wait on a channel: it guards against a hung test and is
// never used to assert timing.
const hang = 10 * time.Second

func await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hang):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// gate is a RunFunc whose runs announce their start and wait for release.
type gate struct {
	started chan string   // receives the key of each run as it starts
	release chan struct{} // each receive lets one run return
	mu      sync.Mutex
	runs    [][]int // payloads of each run, in start order
}

func newGate() *gate {
	return &gate{started: make(chan string, 1000), release: make(chan struct{})}
}

func (g *gate) run(ctx context.Context, key string, payloads []int) error {
	g.mu.Lock()
	g.runs = append(g.runs, slices.Clone(payloads))
	n := len(g.runs)
	g.mu.Unlock()
	g.started <- key
	<-g.release
	return fmt.Errorf("run %d of %s", n, key)
}

func (g *gate) next(t *testing.T) string {
	t.Helper()
	select {
	case k := <-g.started:
		return k
	case <-time.After(hang):
		t.Fatal("timed out waiting for a run to start")
		return ""
	}
}

func (g *gate) runsSoFar() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.runs)
}

func assertIdle[K comparable, V any](t *testing.T, q *keyq.Queue[K, V]) {
	t.Helper()
	if r, qd, n := q.Running(), q.Queued(), q.Len(); r != 0 || qd != 0 || n != 0 {
		t.Fatalf("idle queue: Running=%d Queued=%d Len=%d, want 0 0 0", r, qd, n)
	}
}

// TestCoalesce: 200 submissions while a key's run is blocked fold into
// exactly one follow-up run, and every ticket completes with it.
func TestCoalesce(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{MaxConcurrent: 4}, g.run)
	first := q.Submit("k", -1)
	g.next(t)

	const n = 200
	tickets := make([]*keyq.Ticket, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); tickets[i] = q.Submit("k", i) }()
	}
	wg.Wait()
	if r, qd, l := q.Running(), q.Queued(), q.Len(); r != 1 || qd != 0 || l != 1 {
		t.Fatalf("during the run: Running=%d Queued=%d Len=%d, want 1 0 1", r, qd, l)
	}
	for _, tk := range tickets {
		select {
		case <-tk.Done():
			t.Fatal("a ticket completed before any run that started after its Submit")
		default:
		}
	}

	g.release <- struct{}{}
	if err := first.Err(); err == nil || err.Error() != "run 1 of k" {
		t.Fatalf("first ticket: %v, want run 1's error", err)
	}
	g.next(t)
	g.release <- struct{}{}
	for i, tk := range tickets {
		await(t, fmt.Sprintf("ticket %d", i), tk.Done())
		if err := tk.Err(); err == nil || err.Error() != "run 2 of k" {
			t.Fatalf("ticket %d: %v, want the follow-up's error", i, err)
		}
	}
	runs := g.runsSoFar()
	if len(runs) != 2 {
		t.Fatalf("%d runs, want the blocked one plus exactly one follow-up", len(runs))
	}
	got := slices.Sorted(slices.Values(runs[1]))
	for i, p := range got {
		if p != i {
			t.Fatalf("follow-up payloads %v: want each of 0..%d exactly once", got, n-1)
		}
	}
	assertIdle(t, q)
}

// TestJoinQueued: a submission for a key waiting for a slot joins that run,
// and a follow-up waits behind the keys that were already waiting.
func TestJoinQueued(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{MaxConcurrent: 1}, g.run)
	a1 := q.Submit("a", 1)
	order := []string{g.next(t)}
	b1, b2 := q.Submit("b", 10), q.Submit("b", 11) // queued: no slot
	a2 := q.Submit("a", 2)                         // follow-up of a
	if r, qd, l := q.Running(), q.Queued(), q.Len(); r != 1 || qd != 1 || l != 2 {
		t.Fatalf("Running=%d Queued=%d Len=%d, want 1 1 2", r, qd, l)
	}
	for range 2 {
		g.release <- struct{}{}
		order = append(order, g.next(t))
	}
	g.release <- struct{}{}
	for _, tk := range []*keyq.Ticket{a1, b1, b2, a2} {
		await(t, "ticket", tk.Done())
	}
	if want := []string{"a", "b", "a"}; !slices.Equal(order, want) {
		t.Fatalf("start order %v, want %v (the follow-up waits behind b)", order, want)
	}
	if runs := g.runsSoFar(); !slices.Equal(runs[1], []int{10, 11}) {
		t.Fatalf("b's run got %v, want both submissions [10 11]", runs[1])
	}
	if b1.Err().Error() != "run 2 of b" || b2.Err().Error() != "run 2 of b" {
		t.Fatalf("b's tickets: %v, %v; want b's run's error", b1.Err(), b2.Err())
	}
	assertIdle(t, q)
}

// TestMaxConcurrent: the number of keys running never exceeds the bound, and
// each finished run lets exactly one waiting key start.
func TestMaxConcurrent(t *testing.T) {
	for _, tc := range []struct{ max, want int }{{0, 1}, {-3, 1}, {1, 1}, {3, 3}, {20, 10}} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			const keys = 10
			var running, peak atomic.Int32
			g := newGate()
			q := keyq.New(keyq.Options{MaxConcurrent: tc.max}, func(ctx context.Context, k string, p []int) error {
				n := running.Add(1)
				for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
				}
				defer running.Add(-1)
				return g.run(ctx, k, p)
			})
			var tickets []*keyq.Ticket
			for i := range keys {
				tickets = append(tickets, q.Submit(fmt.Sprint("key", i), i))
			}
			for range tc.want {
				g.next(t)
			}
			if r, qd := q.Running(), q.Queued(); r != tc.want || qd != keys-tc.want {
				t.Fatalf("Running=%d Queued=%d, want %d %d", r, qd, tc.want, keys-tc.want)
			}
			for i := range keys {
				g.release <- struct{}{}
				if i+tc.want < keys {
					g.next(t) // exactly one more starts
				}
			}
			for _, tk := range tickets {
				await(t, "ticket", tk.Done())
			}
			if p := peak.Load(); int(p) != tc.want {
				t.Fatalf("peak concurrency %d, want %d", p, tc.want)
			}
			assertIdle(t, q)
		})
	}
}

const (
	stressWorkers = 16  // goroutines submitting
	stressPerW    = 150 // submissions per worker
	stressKeys    = 8
	stressMax     = 3 // MaxConcurrent
)

// stress is a RunFunc that records what the guarantees are about.
type stress struct {
	t        *testing.T
	seq      atomic.Int64 // orders Submits and run starts
	active   [stressKeys]atomic.Int32
	overlaps [stressKeys]atomic.Int32
	running  atomic.Int32
	exceeded atomic.Int32

	mu     sync.Mutex
	runOf  map[int]int64     // payload id -> start seq of the run that took it
	perKey [stressKeys][]int // payloads as delivered, per key
}

// sub is one submission: the seq just before Submit, and its ticket.
type sub struct {
	id, key int
	at      int64
	ticket  *keyq.Ticket
}

func (s *stress) run(_ context.Context, k int, ids []int) error {
	start := s.seq.Add(1)
	if s.running.Add(1) > stressMax {
		s.exceeded.Add(1)
	}
	if s.active[k].Add(1) > 1 {
		s.overlaps[k].Add(1)
	}
	runtime.Gosched() // widen the window for an overlap
	s.mu.Lock()
	for _, id := range ids {
		if _, dup := s.runOf[id]; dup {
			s.t.Errorf("payload %d delivered twice", id)
		}
		s.runOf[id] = start
	}
	s.perKey[k] = append(s.perKey[k], ids...)
	s.mu.Unlock()
	s.active[k].Add(-1)
	s.running.Add(-1)
	return fmt.Errorf("%d", start)
}

// checkTicket: the ticket completed with the run that took its payload,
// and that run started after the Submit.
func (s *stress) checkTicket(t *testing.T, x sub) {
	await(t, "ticket", x.ticket.Done())
	s.mu.Lock()
	start, ok := s.runOf[x.id]
	s.mu.Unlock()
	switch {
	case !ok:
		t.Fatalf("payload %d never delivered", x.id)
	case start <= x.at:
		t.Fatalf("payload %d: its run started (seq %d) before its Submit (seq %d)", x.id, start, x.at)
	case x.ticket.Err().Error() != fmt.Sprint(start):
		t.Fatalf("payload %d: ticket completed by run %v, but its payload went to run %d", x.id, x.ticket.Err(), start)
	}
}

// checkOrder: one worker's submissions to a key are sequential, so they
// must reach the runs in that order.
func (s *stress) checkOrder(t *testing.T, k int) {
	last := map[int]int{}
	for _, id := range s.perKey[k] {
		w := id / stressPerW
		if prev, ok := last[w]; ok && id < prev {
			t.Errorf("key %d: payload %d after %d from the same worker", k, id, prev)
		}
		last[w] = id
	}
}

// TestStress: many goroutines submit to many keys. No key ever runs twice
// at once, the concurrency bound holds, every payload is delivered exactly
// once in per-key submission order, and every ticket completes with the run
// that took its payload, which started after its Submit.
func TestStress(t *testing.T) {
	s := &stress{t: t, runOf: map[int]int64{}}
	q := keyq.New(keyq.Options{MaxConcurrent: stressMax}, s.run)
	subs := make([][]sub, stressWorkers)
	var wg sync.WaitGroup
	for w := range stressWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range stressPerW {
				x := sub{id: w*stressPerW + i, key: (w + i) % stressKeys}
				x.at = s.seq.Add(1)
				x.ticket = q.Submit(x.key, x.id)
				subs[w] = append(subs[w], x)
			}
		}()
	}
	wg.Wait()
	for w := range stressWorkers {
		for _, x := range subs[w] {
			s.checkTicket(t, x)
		}
	}
	for k := range stressKeys {
		if n := s.overlaps[k].Load(); n != 0 {
			t.Errorf("key %d: %d overlapping runs", k, n)
		}
		s.checkOrder(t, k)
	}
	if n := s.exceeded.Load(); n != 0 {
		t.Errorf("MaxConcurrent exceeded %d times", n)
	}
	if n := len(s.runOf); n != stressWorkers*stressPerW {
		t.Errorf("%d payloads delivered, want %d", n, stressWorkers*stressPerW)
	}
	assertIdle(t, q)
}

// TestPanic: a panic becomes the run's error and does not wedge the key.
func TestPanic(t *testing.T) {
	sentinel := errors.New("sentinel")
	q := keyq.New(keyq.Options{}, func(_ context.Context, k string, p []any) error {
		switch v := p[0].(type) {
		case string:
			panic(v)
		case error:
			panic(v)
		case bool:
			runtime.Goexit()
		}
		return nil
	})
	tests := []struct {
		name    string
		payload any
		check   func(error) bool
	}{
		{"string value", "boom", func(err error) bool {
			var pe *keyq.PanicError
			return errors.As(err, &pe) && pe.Value == "boom" && pe.Key == "k" && len(pe.Stack) > 0
		}},
		{"error value", sentinel, func(err error) bool { return errors.Is(err, sentinel) }},
		{"runtime.Goexit", true, func(err error) bool { return err != nil }},
		{"the key still runs", 1, func(err error) bool { return err == nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := q.Submit("k", tc.payload)
			await(t, "ticket", tk.Done())
			if err := tk.Err(); !tc.check(err) {
				t.Fatalf("ticket error %v", err)
			}
			assertIdle(t, q)
		})
	}
}

// TestRunContext: runs get a context derived from Options.Context.
func TestRunContext(t *testing.T) {
	type ctxKey struct{}
	base := context.WithValue(context.Background(), ctxKey{}, "base")
	q := keyq.New(keyq.Options{Context: base}, func(ctx context.Context, _ string, _ []int) error {
		if ctx.Value(ctxKey{}) != "base" {
			return errors.New("run context does not derive from Options.Context")
		}
		return ctx.Err()
	})
	if err := q.Submit("k", 1).Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestWaitGivesUp: Wait returns when its context ends; the run still happens.
func TestWaitGivesUp(t *testing.T) {
	g := newGate()
	q := keyq.New(keyq.Options{}, g.run)
	tk := q.Submit("k", 1)
	g.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tk.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled wrapped", err)
	}
	g.release <- struct{}{}
	if err := tk.Wait(context.Background()); err == nil || err.Error() != "run 1 of k" {
		t.Fatalf("after the run: %v, want the run's error", err)
	}
}

// goroutineID is the number runtime.Stack prints for the calling goroutine.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)] // "goroutine 42 [running]:..."
	var id string
	fmt.Sscanf(string(buf), "goroutine %s", &id)
	return id
}

// Keys waiting for a slot run on the goroutine whose run freed it, which
// keeps its grown stack, and not each on a new goroutine; a run that calls
// runtime.Goexit ends its goroutine, and the keys behind it still run.
func TestWaitingKeysRunOnTheFreedGoroutine(t *testing.T) {
	var mu sync.Mutex
	ids := map[string]string{} // key -> goroutine
	block := make(chan struct{})
	done := make(chan struct{}, 100)
	q := keyq.New(keyq.Options{MaxConcurrent: 1}, func(_ context.Context, key string, _ []int) error {
		mu.Lock()
		ids[key] = goroutineID()
		mu.Unlock()
		defer func() { done <- struct{}{} }()
		if key == "k0" {
			<-block
		}
		if key == "exit" {
			runtime.Goexit()
		}
		return nil
	})
	defer q.Shutdown(context.Background())
	q.Submit("k0", 0)
	for i := 1; i < 10; i++ {
		q.Submit(fmt.Sprintf("k%d", i), i)
	}
	q.Submit("exit", 0)
	q.Submit("after", 0)
	close(block)
	for range 12 {
		select {
		case <-done:
		case <-time.After(hang):
			t.Fatal("timed out waiting for the runs")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < 10; i++ {
		if k := fmt.Sprintf("k%d", i); ids[k] != ids["k0"] {
			t.Errorf("%s ran on goroutine %s, k0 on %s: a new goroutine per run", k, ids[k], ids["k0"])
		}
	}
	if ids["after"] == "" || ids["after"] == ids["exit"] {
		t.Errorf("the key behind a run that called runtime.Goexit ran on goroutine %q (the exited one: %s)", ids["after"], ids["exit"])
	}
}
