package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/testenv"
)

// soleLocker is locker with Options.Sole: instances may run alone.
func soleLocker(t *testing.T, ns, id string, clk clock.WithTicker) (*lease.Locker, *atomic.Int64) {
	t.Helper()
	env := testenv.Get(t)
	n := &atomic.Int64{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writes{rt, n} })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lease.New(c, lease.Options{Operator: "op", Identity: id, Duration: 3 * time.Second, Namespace: ns, Clock: clk, Sole: true})
	if err != nil {
		t.Fatal(err)
	}
	return l, n
}

func getSole(t *testing.T, ns string) (*coordinationv1.Lease, error) {
	le := &coordinationv1.Lease{}
	err := testenv.Get(t).Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: lease.SoleName("op")}, le)
	return le, err
}

// TestSoleCostsTwoWrites: however many keys it then reconciles, the sole
// Lease costs its create and its delete (and a list of the per-key Leases
// when it is taken), and leaves nothing behind.
func TestSoleCostsTwoWrites(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	a, n := soleLocker(t, ns, "a", nil)
	ctx := context.Background()
	s, err := a.AcquireSole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	le, err := getSole(t, ns)
	if err != nil || *le.Spec.HolderIdentity != "a" || le.Labels[lease.OperatorLabel] != "op" || le.Annotations[lease.SoleAnnotation] != "true" || le.Annotations[lease.KeyAnnotation] != "" {
		t.Fatalf("sole lease after AcquireSole: %+v %v", le, err)
	}
	if got, _ := a.Stale(ctx); len(got) != 0 {
		t.Fatalf("the sole lease listed as a key's: %v", got)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := getSole(t, ns); !apierrors.IsNotFound(err) {
		t.Fatalf("sole lease left after Release: %v", err)
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("%d writes for AcquireSole + Release, want 2", got)
	}
}

// TestSoleAndKeyLeasesExclude: while an instance holds a live per-key
// Lease, another cannot take the sole Lease (ErrShared, and the sole
// Lease it created is gone again); while an instance holds the sole
// Lease, another cannot keep a per-key Lease (HeldElsewhere with Sole, the
// per-key Lease gone again), and the holder is asked to step down: its
// next renewal says so. Once it has released, per-key Leases are taken.
func TestSoleAndKeyLeasesExclude(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	a, _ := soleLocker(t, ns, "a", nil)
	b, _ := soleLocker(t, ns, "b", nil)
	ctx, k := context.Background(), key(ns, "x")

	h, err := a.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := b.AcquireSole(ctx); !errors.Is(err, lease.ErrShared) {
		t.Fatalf("AcquireSole while another instance holds a key: %v %v, want ErrShared", s, err)
	}
	if _, err := getSole(t, ns); !apierrors.IsNotFound(err) {
		t.Fatalf("sole lease left after ErrShared: %v", err)
	}
	if s, err := a.AcquireSole(ctx); err != nil { // its own key Lease does not count
		t.Fatalf("AcquireSole with only its own key lease: %v", err)
	} else if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if dirty, err := h.Release(ctx); dirty || err != nil {
		t.Fatalf("Release: %v %v", dirty, err)
	}

	s, err := a.AcquireSole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var he *lease.HeldElsewhere
	if hb, err := b.Acquire(ctx, k); !errors.As(err, &he) || !he.Sole || he.Holder != "a" || he.Key != k {
		t.Fatalf("Acquire while another instance runs alone: %v %v, want HeldElsewhere with Sole", hb, err)
	}
	if _, err := getLease(t, k); !apierrors.IsNotFound(err) {
		t.Fatalf("key lease left after backing off: %v", err)
	}
	if le, _ := getSole(t, ns); le.Annotations[lease.WantedAnnotation] != "b" {
		t.Fatalf("sole lease not marked wanted: %v", le.Annotations)
	}
	if s2, err := b.AcquireSole(ctx); !errors.As(err, &he) || !he.Sole || s2 != nil {
		t.Fatalf("AcquireSole while held: %v %v, want HeldElsewhere", s2, err)
	}
	if wanted, err := s.Renew(ctx); !wanted || err != nil {
		t.Fatalf("holder's Renew: wanted %v, %v; want wanted", wanted, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hb, err := b.Acquire(ctx, k)
	if err != nil {
		t.Fatalf("Acquire once the sole lease is released: %v", err)
	}
	if _, err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSoleTakenOverAtExpiry: a holder that stopped renewing loses the sole
// Lease at its expiry to the next instance; its Renew says so.
func TestSoleTakenOverAtExpiry(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	fc := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	a, _ := soleLocker(t, ns, "a", fc)
	b, _ := soleLocker(t, ns, "b", fc)
	ctx := context.Background()
	s, err := a.AcquireSole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var he *lease.HeldElsewhere
	if _, err := b.AcquireSole(ctx); !errors.As(err, &he) {
		t.Fatalf("AcquireSole while held: %v", err)
	}
	fc.Step(4 * time.Second) // past a's 3 s
	sb, err := b.AcquireSole(ctx)
	if err != nil {
		t.Fatalf("AcquireSole of an expired sole lease: %v", err)
	}
	le, _ := getSole(t, ns)
	if *le.Spec.HolderIdentity != "b" || *le.Spec.LeaseTransitions != 1 || le.Annotations[lease.WantedAnnotation] != "" {
		t.Fatalf("after take-over: %+v %v", le.Spec, le.Annotations)
	}
	if _, err := s.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("old holder's Renew: %v, want ErrLost", err)
	}
	if err := sb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSoleKeepsAMark: a key's expired Lease carries a mark (an event
// another instance acknowledged, for a holder that died). An instance
// that takes it over and then backs off because another runs alone writes
// the mark back: the reconcile it asks for is still owed by whoever takes
// the Lease next.
func TestSoleKeepsAMark(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	fc := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	dead, _ := soleLocker(t, ns, "dead", fc)
	c, _ := soleLocker(t, ns, "c", fc)
	a, _ := soleLocker(t, ns, "a", fc)
	b, _ := soleLocker(t, ns, "b", fc)
	ctx, k := context.Background(), key(ns, "x")
	if _, err := dead.Acquire(ctx, k); err != nil {
		t.Fatal(err)
	}
	var he *lease.HeldElsewhere
	if _, err := c.Acquire(ctx, k); !errors.As(err, &he) || he.Sole { // marks it
		t.Fatalf("mark: %v", err)
	}
	fc.Step(4 * time.Second) // dead's Lease expires
	s, err := a.AcquireSole(ctx)
	if err != nil {
		t.Fatalf("AcquireSole with only an expired key lease: %v", err)
	}
	if _, err := b.TakeOverIfAbandoned(ctx, k); !errors.As(err, &he) || !he.Sole {
		t.Fatalf("take over while another runs alone: %v, want HeldElsewhere with Sole", err)
	}
	le, err := getLease(t, k)
	if err != nil || le.Annotations[lease.DirtyAnnotation] != "c" {
		t.Fatalf("the key's lease after backing off: %v %v, want the mark kept", le, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSoleNeverBesideAKeyLease: two instances race, one taking and
// releasing the sole Lease, the other a key's Lease, 200 times each at
// once against the API server: never both held at once.
func TestSoleNeverBesideAKeyLease(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	a, _ := soleLocker(t, ns, "a", nil)
	b, _ := soleLocker(t, ns, "b", nil)
	ctx, k := context.Background(), key(ns, "x")
	var sole, keyed atomic.Int32
	var both, soles, keys atomic.Int32
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 200 {
			s, err := a.AcquireSole(ctx)
			if err != nil {
				continue
			}
			soles.Add(1)
			sole.Store(1)
			if keyed.Load() == 1 {
				both.Add(1)
			}
			time.Sleep(time.Millisecond)
			sole.Store(0)
			if err := s.Release(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 200 {
			h, err := b.Acquire(ctx, k)
			if err != nil {
				continue
			}
			keys.Add(1)
			keyed.Store(1)
			if sole.Load() == 1 {
				both.Add(1)
			}
			time.Sleep(time.Millisecond)
			keyed.Store(0)
			for {
				dirty, err := h.Release(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if !dirty {
					break
				}
			}
		}
	}()
	wg.Wait()
	t.Logf("sole lease held %d times, the key's %d times", soles.Load(), keys.Load())
	if both.Load() != 0 {
		t.Fatalf("the sole lease and a key's lease held at once %d times", both.Load())
	}
	if soles.Load() == 0 || keys.Load() == 0 {
		t.Fatalf("no contention to speak of: sole %d, key %d", soles.Load(), keys.Load())
	}
	list := &coordinationv1.LeaseList{}
	if err := testenv.Get(t).Client.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("leases left: %v %v", names(list.Items), err)
	}
}

func names(ls []coordinationv1.Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s(%s)", l.Name, ptr(l.Spec.HolderIdentity)))
	}
	return out
}

func ptr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestTakeSoleIfFreeAsksNothing: TakeSoleIfFree takes a free sole Lease
// as AcquireSole does, but finding it held by another live instance it
// writes nothing (no wanted mark: the holder goes on running alone).
func TestTakeSoleIfFreeAsksNothing(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	a, _ := soleLocker(t, ns, "a", nil)
	b, nb := soleLocker(t, ns, "b", nil)
	ctx := context.Background()
	s, err := a.TakeSoleIfFree(ctx)
	if err != nil {
		t.Fatalf("TakeSoleIfFree of a free sole Lease: %v", err)
	}
	var he *lease.HeldElsewhere
	if _, err := b.TakeSoleIfFree(ctx); !errors.As(err, &he) || !he.Sole || he.Holder != "a" {
		t.Fatalf("TakeSoleIfFree of a's sole Lease: %v, want HeldElsewhere by a", err)
	}
	if n := nb.Load(); n != 1 { // its create, refused
		t.Fatalf("b wrote %d times, want 1 (the refused create)", n)
	}
	le, err := getSole(t, ns)
	if err != nil || le.Annotations[lease.WantedAnnotation] != "" {
		t.Fatalf("the sole Lease: %v %v, want it unmarked", le.Annotations, err)
	}
	if wanted, err := s.Renew(ctx); err != nil || wanted {
		t.Fatalf("a's renewal: wanted %v, %v; want not wanted", wanted, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
