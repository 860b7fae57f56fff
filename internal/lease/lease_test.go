package lease_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/lease"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

var (
	scheme = runtime.NewScheme()
	testop string
)

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "lease-test-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	testop = filepath.Join(dir, "testop")
	if !testing.Short() {
		if b, err := exec.Command("go", "build", "-o", testop, "../testop").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build testop: %v\n%s", err, b)
			return 1
		}
	}
	return testenv.Main(m, testenv.Options{Scheme: scheme, NoControllerManager: true,
		CRDDirs: []string{"../../config/crd", "../../examples/configwatcher/config/crd"}})
}

// writes counts the requests that are not reads.
type writes struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (w writes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet {
		w.n.Add(1)
	}
	return w.rt.RoundTrip(r)
}

func locker(t *testing.T, ns, id string, clk clock.WithTicker) (*lease.Locker, *atomic.Int64) {
	t.Helper()
	env := testenv.Get(t)
	n := &atomic.Int64{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writes{rt, n} })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lease.New(c, lease.Options{Operator: "op", Identity: id, Duration: 3 * time.Second, Namespace: ns, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return l, n
}

func getLease(t *testing.T, key reconcile.Request) (*coordinationv1.Lease, error) {
	le := &coordinationv1.Lease{}
	err := testenv.Get(t).Client.Get(context.Background(), types.NamespacedName{Namespace: key.Namespace, Name: lease.Name("op", key.NamespacedName)}, le)
	return le, err
}

func key(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// An uncontended reconcile costs two writes and leaves no Lease.
func TestUncontendedCostsTwoWrites(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	l, n := locker(t, ns, "a", nil)
	k := key(ns, "x")
	h, err := l.Acquire(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	le, err := getLease(t, k)
	if err != nil || *le.Spec.HolderIdentity != "a" || le.Annotations[lease.KeyAnnotation] != ns+"/x" || le.Labels[lease.OperatorLabel] != "op" {
		t.Fatalf("lease after Acquire: %+v %v", le, err)
	}
	if dirty, err := h.Release(context.Background()); dirty || err != nil {
		t.Fatalf("Release: dirty %v, %v", dirty, err)
	}
	if _, err := getLease(t, k); !apierrors.IsNotFound(err) {
		t.Fatalf("lease left after Release: %v", err)
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("%d writes for acquire + release, want 2", got)
	}
}

// Another instance's event marks the Lease; the holder is told to reconcile
// again, once, and only then lets go.
func TestDirtyMarkMakesTheHolderReconcileAgain(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	a, _ := locker(t, ns, "a", nil)
	b, bWrites := locker(t, ns, "b", nil)
	ctx, k := context.Background(), key(ns, "x")
	h, err := a.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var he *lease.HeldElsewhere
	if _, err := b.Acquire(ctx, k); !errors.As(err, &he) || he.Holder != "a" || time.Until(he.Expires) <= 0 {
		t.Fatalf("b.Acquire while a holds: %v, want HeldElsewhere naming a, unexpired", err)
	}
	if got := bWrites.Load(); got != 2 {
		t.Fatalf("b sent %d writes (a refused create, then the mark), want 2", got)
	}
	marked, _ := getLease(t, k)
	if _, err := b.Acquire(ctx, k); !errors.As(err, &he) {
		t.Fatalf("second mark: %v", err)
	}
	if again, _ := getLease(t, k); again.ResourceVersion != marked.ResourceVersion {
		t.Fatal("a second event wrote the mark again: a lease already marked needs no write")
	}
	before := bWrites.Load()
	if hb, err := b.TakeOverIfAbandoned(ctx, k); hb != nil || !errors.As(err, &he) || bWrites.Load() != before {
		t.Fatalf("check of a live holder's Lease: %v %v, %d writes; want HeldElsewhere and no write", hb, err, bWrites.Load()-before)
	}
	if err := h.Renew(ctx); err != nil { // conflicts with the mark, keeps it
		t.Fatalf("Renew after a mark: %v", err)
	}
	dirty, err := h.Release(ctx)
	if !dirty || err != nil {
		t.Fatalf("Release after a mark: dirty %v, %v; want dirty", dirty, err)
	}
	le, err := getLease(t, k)
	if err != nil || *le.Spec.HolderIdentity != "a" || le.Annotations[lease.DirtyAnnotation] != "" {
		t.Fatalf("after the first Release: %+v %v; want still held by a, mark cleared", le, err)
	}
	if dirty, err := h.Release(ctx); dirty || err != nil {
		t.Fatalf("second Release: dirty %v, %v", dirty, err)
	}
	if _, err := getLease(t, k); !apierrors.IsNotFound(err) {
		t.Fatalf("lease left: %v", err)
	}
}

// A holder that stops renewing loses the Lease to the next instance once
// it expires; the mark it carried is the taker's reconcile; Stale lists it
// meanwhile.
func TestExpiredLeaseIsTakenOver(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	fc := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	a, _ := locker(t, ns, "a", fc)
	b, _ := locker(t, ns, "b", fc)
	c, _ := locker(t, ns, "c", fc)
	ctx, k := context.Background(), key(ns, "x")
	h, err := a.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var he *lease.HeldElsewhere
	if _, err := c.Acquire(ctx, k); !errors.As(err, &he) { // marks it
		t.Fatal(err)
	}
	if got, _ := a.Stale(ctx); len(got) != 0 {
		t.Fatalf("Stale while held: %v", got)
	}
	fc.Step(4 * time.Second) // past a's 3 s
	if got, err := b.Stale(ctx); err != nil || len(got) != 1 || got[0] != k {
		t.Fatalf("Stale once expired: %v %v, want [%s]", got, err, k)
	}
	hb, err := b.TakeOverIfAbandoned(ctx, k)
	if err != nil || hb == nil {
		t.Fatalf("take over an expired lease: %v %v", hb, err)
	}
	le, _ := getLease(t, k)
	if *le.Spec.HolderIdentity != "b" || *le.Spec.LeaseTransitions != 1 || le.Annotations[lease.DirtyAnnotation] != "" {
		t.Fatalf("after take-over: %+v", le.Spec)
	}
	if err := h.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("old holder's Renew: %v, want ErrLost", err)
	}
	if _, err := h.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("old holder's Release: %v, want ErrLost", err)
	}
	if dirty, err := hb.Release(ctx); dirty || err != nil {
		t.Fatalf("new holder's Release: %v %v", dirty, err)
	}
	if hc, err := c.TakeOverIfAbandoned(ctx, k); hc != nil || err != nil {
		t.Fatalf("check after release: %v %v, want nothing to do", hc, err)
	}
}

func TestKeepAliveOutlivesTheDuration(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	fc := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	a, _ := locker(t, ns, "a", fc)
	b, _ := locker(t, ns, "b", fc)
	ctx, k := context.Background(), key(ns, "x")
	h, err := a.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	stop := h.KeepAlive(ctx, func(err error) { t.Errorf("lost: %v", err) })
	for range 4 { // longer than the 3 s lease, a renewal every second
		fc.Step(time.Second)
		testkit.Eventually(t, 10*time.Second, "a renewal at "+fc.Now().String(), func(context.Context) (bool, error) {
			le, err := getLease(t, k)
			return err == nil && le.Spec.RenewTime != nil && le.Spec.RenewTime.Time.Equal(fc.Now()), err
		})
	}
	var he *lease.HeldElsewhere
	if _, err := b.Acquire(ctx, k); !errors.As(err, &he) {
		t.Fatalf("b.Acquire of a kept-alive lease: %v, want HeldElsewhere", err)
	}
	stop()
	if dirty, err := h.Release(ctx); !dirty || err != nil {
		t.Fatalf("Release: %v %v, want dirty", dirty, err)
	}
	if _, err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := lease.New(nil, lease.Options{}); err == nil {
		t.Fatal("no operator name: want an error")
	}
	if _, err := lease.New(nil, lease.Options{Operator: "op", Duration: 100 * time.Millisecond}); err == nil {
		t.Fatal("sub-second duration: want an error")
	}
}

// TestRefreshRenewsOnlyAStaleLease: a Lease kept between reconciles is
// renewed before the next one only if its last renewal is more than a third
// of its duration old; a Lease taken over meanwhile gives ErrLost.
func TestRefreshRenewsOnlyAStaleLease(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	fc := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	a, n := locker(t, ns, "a", fc)
	b, _ := locker(t, ns, "b", fc)
	ctx, k := context.Background(), key(ns, "x")
	h, err := a.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	fc.Step(500 * time.Millisecond)
	if err := h.Refresh(ctx); err != nil || n.Load() != 1 {
		t.Fatalf("Refresh of a fresh Lease: %v, %d writes; want nil and only the create", err, n.Load())
	}
	fc.Step(time.Second) // 1.5 s since the renewal: more than a third of 3 s
	if err := h.Refresh(ctx); err != nil || n.Load() != 2 {
		t.Fatalf("Refresh of a stale Lease: %v, %d writes; want a renewal", err, n.Load())
	}
	if le, _ := getLease(t, k); !le.Spec.RenewTime.Time.Equal(fc.Now()) {
		t.Fatalf("renewTime %v, want %v", le.Spec.RenewTime, fc.Now())
	}
	fc.Step(4 * time.Second) // expired: b takes it over
	if hb, err := b.Acquire(ctx, k); err != nil || hb == nil {
		t.Fatalf("b takes the expired Lease: %v", err)
	}
	if err := h.Refresh(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Refresh of a Lease taken over: %v, want ErrLost", err)
	}
}

// An instance records its address on the Leases it creates or takes over;
// AcquireOrLocate finds a live holder's address without marking its Lease
// (one refused create, one read), unless forward refuses the address.
func TestAddressLocatesTheHolder(t *testing.T) {
	ns := testenv.Get(t).Namespace(t)
	fc := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	a, _ := locker(t, ns, "a", fc)
	b, bWrites := locker(t, ns, "b", fc)
	aAt, err := lease.New(testenv.Get(t).Client, lease.Options{Operator: "op", Identity: "a", Duration: 3 * time.Second, Namespace: ns, Clock: fc, Address: "http://a:8080"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, k := context.Background(), key(ns, "x")
	if _, err := aAt.Acquire(ctx, k); err != nil {
		t.Fatal(err)
	}
	if le, _ := getLease(t, k); le.Annotations[lease.AddressAnnotation] != "http://a:8080" {
		t.Fatalf("address on the created Lease: %q", le.Annotations[lease.AddressAnnotation])
	}
	var he *lease.HeldElsewhere
	var offered []string
	_, err = b.AcquireOrLocate(ctx, k, func(a string) bool { offered = append(offered, a); return true })
	if !errors.As(err, &he) || !he.Forward || he.Address != "http://a:8080" || he.Holder != "a" {
		t.Fatalf("AcquireOrLocate: %v, want HeldElsewhere to forward to a at http://a:8080", err)
	}
	if le, _ := getLease(t, k); le.Annotations[lease.DirtyAnnotation] != "" || bWrites.Load() != 1 || len(offered) != 1 {
		t.Fatalf("after locating: mark %q, %d writes by b, offered %v; want no mark, only the refused create", le.Annotations[lease.DirtyAnnotation], bWrites.Load(), offered)
	}
	if _, err := b.AcquireOrLocate(ctx, k, func(string) bool { return false }); !errors.As(err, &he) || he.Forward {
		t.Fatalf("AcquireOrLocate refusing the address: %v, want a marked HeldElsewhere", err)
	}
	if le, _ := getLease(t, k); le.Annotations[lease.DirtyAnnotation] != "b" {
		t.Fatal("not marked when the address was refused")
	}
	// A take-over records the new holder's address, or removes the old one.
	fc.Step(4 * time.Second)
	bAt, err := lease.New(testenv.Get(t).Client, lease.Options{Operator: "op", Identity: "b", Duration: 3 * time.Second, Namespace: ns, Clock: fc, Address: "http://b:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bAt.Acquire(ctx, k); err != nil {
		t.Fatal(err)
	}
	if le, _ := getLease(t, k); le.Annotations[lease.AddressAnnotation] != "http://b:8080" {
		t.Fatalf("address after b took over: %q", le.Annotations[lease.AddressAnnotation])
	}
	fc.Step(4 * time.Second)
	h, err := a.Acquire(ctx, k) // a, now without an address
	if err != nil {
		t.Fatal(err)
	}
	if le, _ := getLease(t, k); le.Annotations[lease.AddressAnnotation] != "" {
		t.Fatalf("address after a took over without one: %q", le.Annotations[lease.AddressAnnotation])
	}
	if _, err := b.AcquireOrLocate(ctx, k, func(string) bool { return true }); !errors.As(err, &he) || he.Forward {
		t.Fatalf("a holder without an address: %v, want marked", err)
	}
	if _, err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
