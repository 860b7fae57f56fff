// Package lease serializes the reconciles of one key across the instances
// of a serverless operator with one coordination.k8s.io Lease per key.
//
// The protocol, for a key K:
//
//   - Acquire creates K's Lease with this instance as holder (one write).
//     If the Lease exists and its holder's renewal has expired, or this
//     instance holds it already (a previous process of the same identity
//     died), it is taken over with an optimistic update.
//   - If another live instance holds it, Acquire marks it dirty (an
//     annotation, one update with the resourceVersion it read) and returns
//     a *HeldElsewhere error: the caller acknowledges its event, because the
//     holder reconciles once more before it lets go.
//   - While the holder reconciles, KeepAlive renews the Lease every third
//     of its duration. A renewal that finds the Lease taken cancels the
//     reconcile.
//   - Release deletes the Lease with its last resourceVersion as a
//     precondition (one write). If the delete conflicts because the Lease
//     was marked dirty meanwhile, Release clears the mark, keeps the Lease
//     and reports dirty: the caller reconciles again and releases again. A
//     mark can therefore never be lost: either it is written before the
//     holder's delete (the delete fails) or it finds no Lease and the marker
//     takes the Lease itself.
//   - If the holder dies, its Lease expires with the dirty mark on it. The
//     instance that marked it arranges to look again at the expiry (see
//     HeldElsewhere.Expires); any later event or sweep takes the expired
//     Lease over as well.
//
// Forwarding instead of marking (Options.Address, AcquireOrLocate): an
// instance records in the Lease it creates or takes over, in the same write,
// the address where the other instances of the operator reach it
// (annotation opzero.dev/holder-address). AcquireOrLocate is Acquire for an
// event that can be sent on: when a live instance with an address holds the
// Lease, it writes nothing and returns *HeldElsewhere with Forward set; the
// caller sends the event to the holder, whose per-key queue reconciles it in
// a run that starts after it arrived, and falls back to Acquire (the mark)
// if the holder cannot be reached or does not take it. A holder is never
// asked to write anything to clear a mark that was never made: a forwarded
// event costs no Lease write at all.
//
// An uncontended hold costs two writes: the create and the delete. A
// holder may keep a Lease across several reconciles of its key (the
// serverless engine does while events for the key keep coming): a mark
// that arrives meanwhile is found by the next Renew or by Release, which
// reports it; the reconciles the holder ran after the mark already cover
// it, so that costs at most one needless reconcile.
// Leases live in the operator's own namespace (Options.Namespace), carry the
// label opzero.dev/operator=<operator> and the key in the annotation
// opzero.dev/key; Stale lists those whose holder is gone.
package lease

// Why this file is over 500 lines: it is the per-key Lease protocol
// (take, renew, hand off, release, the dirty mark) in one place, so that
// its exclusion argument can be read top to bottom.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Labels and annotations on the Leases.
const (
	OperatorLabel   = "opzero.dev/operator"
	KeyAnnotation   = "opzero.dev/key"
	DirtyAnnotation = "opzero.dev/dirty"
	// AddressAnnotation is where the holder takes events forwarded to it
	// (Options.Address); absent if it advertises none.
	AddressAnnotation = "opzero.dev/holder-address"
)

// ErrLost is the cause of a reconcile's context when its Lease was taken
// by another instance (this one failed to renew it in time).
var ErrLost = errors.New("lease: the lease of this key was taken over by another instance")

// HeldElsewhere is returned by Acquire when another live instance holds the
// key's Lease. The Lease has been marked dirty: the holder reconciles again
// before releasing it. From AcquireOrLocate with Forward set, it has not:
// the caller must send the event to Address, or fall back to Acquire.
type HeldElsewhere struct {
	Key     reconcile.Request
	Holder  string
	Expires time.Time // when the holder's last renewal runs out
	// Address is where the holder takes forwarded events ("": none).
	Address string
	// Forward: not marked; the event is the caller's to forward.
	Forward bool
	// Sole: the holder holds the operator's sole Lease (every key; Key is
	// then the key asked for, or "*" from AcquireSole). Nothing was
	// marked: the holder was asked to step down (sole.go), and the caller
	// must not reconcile; it forwards the event (Forward) or has it
	// delivered again.
	Sole bool
}

func (e *HeldElsewhere) Error() string {
	if e.Sole {
		return fmt.Sprintf("%s: %s holds the operator's sole lease (until %s); asked to step down",
			e.Key, e.Holder, e.Expires.Format(time.RFC3339Nano))
	}
	if e.Forward {
		return fmt.Sprintf("%s is being reconciled by %s at %s (lease until %s); not marked, to be forwarded",
			e.Key, e.Holder, e.Address, e.Expires.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%s is being reconciled by %s (lease until %s); marked for another reconcile",
		e.Key, e.Holder, e.Expires.Format(time.RFC3339Nano))
}

// Options configures a Locker.
type Options struct {
	// Operator names the operator; it prefixes Lease names and labels them.
	Operator string
	// Identity is this instance's holder identity (DefaultIdentity()).
	Identity string
	// Duration is how long a Lease stays held without renewal (15 s).
	Duration time.Duration
	// Namespace holds the Leases, one per key, named after a hash of the
	// key: the operator's own namespace, so one Role covers them (default).
	Namespace string
	// Clock stamps renewals, judges expiry and paces KeepAlive (the wall
	// clock if nil). Tests pass k8s.io/utils/clock/testing's FakeClock.
	Clock clock.WithTicker
	// Address, if set, is where the other instances of the operator reach
	// this one (a URL): recorded in each Lease this instance creates or
	// takes over (AddressAnnotation), so that they forward it the events of
	// its keys (AcquireOrLocate) instead of marking the Lease.
	Address string
	// Sole: instances may run alone under the operator's sole Lease
	// (AcquireSole); each per-key Lease taken is then checked against it
	// (one read more per take), see sole.go.
	Sole bool
}

// DefaultIdentity is $POD_NAME, else the host name (a pod's name in
// Kubernetes), with "-<pid>" appended when the process is not PID 1 (several
// instances on one machine, as on a laptop).
func DefaultIdentity() string {
	id := os.Getenv("POD_NAME")
	if id == "" {
		id, _ = os.Hostname()
		if pid := os.Getpid(); pid != 1 {
			id += "-" + strconv.Itoa(pid)
		}
	}
	return id
}

// Locker takes and releases per-key Leases for one operator instance.
type Locker struct {
	c    client.Client
	opts Options
}

// New returns a Locker writing through c (which must not be a cache).
func New(c client.Client, o Options) (*Locker, error) {
	if o.Operator == "" {
		return nil, errors.New("lease: the operator name is empty")
	}
	if o.Identity == "" {
		o.Identity = DefaultIdentity()
	}
	if o.Duration <= 0 {
		o.Duration = 15 * time.Second
	}
	if o.Duration < time.Second {
		return nil, fmt.Errorf("lease: duration %s is below the Lease API's resolution of one second", o.Duration)
	}
	if o.Namespace == "" {
		o.Namespace = metav1.NamespaceDefault
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Locker{c: c, opts: o}, nil
}

// Identity is this instance's holder identity.
func (l *Locker) Identity() string { return l.opts.Identity }

// Duration is the Leases' duration.
func (l *Locker) Duration() time.Duration { return l.opts.Duration }

// Address is where this instance takes forwarded events ("": none).
func (l *Locker) Address() string { return l.opts.Address }

// Name is the Lease name of key for operator.
func Name(operator string, key types.NamespacedName) string {
	sum := sha256.Sum256([]byte(key.Namespace + "/" + key.Name))
	n := operator
	if len(n) > 40 {
		n = n[:40]
	}
	return n + "-lock-" + hex.EncodeToString(sum[:8])
}

func (l *Locker) objectKey(key reconcile.Request) client.ObjectKey {
	return client.ObjectKey{Namespace: l.opts.Namespace, Name: Name(l.opts.Operator, key.NamespacedName)}
}

// maxRounds bounds the optimistic loops: each round follows a write by
// another instance, so running out means heavy contention on one key.
const maxRounds = 10

// Acquire takes key's Lease for this instance. It returns *HeldElsewhere
// (after marking the Lease dirty) when another live instance holds it.
func (l *Locker) Acquire(ctx context.Context, key reconcile.Request) (*Held, error) {
	return l.acquire(ctx, key, nil, nil)
}

// AcquireOrLocate is Acquire for an event the caller can forward: if a
// live instance holds the Lease and records an address that forward
// accepts (not this instance's own), it writes nothing and returns
// *HeldElsewhere with Forward and Address set. The caller then sends the
// event there and, if that fails, calls Acquire, which marks the Lease.
func (l *Locker) AcquireOrLocate(ctx context.Context, key reconcile.Request, forward func(address string) bool) (*Held, error) {
	return l.acquire(ctx, key, nil, forward)
}

// acquire is Acquire; existing, if set, is the Lease as just read (no
// create is tried first); forward, if set, is AcquireOrLocate's.
func (l *Locker) acquire(ctx context.Context, key reconcile.Request, existing *coordinationv1.Lease, forward func(string) bool) (*Held, error) {
	ok := l.objectKey(key)
	for range maxRounds {
		now := l.opts.Clock.Now()
		le := existing
		if existing == nil {
			le = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ok.Namespace, Name: ok.Name,
				Labels:      map[string]string{OperatorLabel: l.opts.Operator},
				Annotations: map[string]string{KeyAnnotation: key.String()}}}
			l.hold(le, now, true)
			l.advertise(le)
			err := l.c.Create(ctx, le)
			if err == nil {
				return l.afterTake(ctx, &Held{l: l, key: key, lease: le}, "", forward)
			}
			if !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("taking the lease of %s: %w", key, err)
			}
			if err := l.c.Get(ctx, ok, le); err != nil {
				if apierrors.IsNotFound(err) {
					continue // released meanwhile
				}
				return nil, fmt.Errorf("reading the lease of %s: %w", key, err)
			}
		}
		existing = nil // a later round starts over
		if l.free(le, now) {
			transitions := ptrOr(le.Spec.LeaseTransitions, 0)
			if holder(le) != l.opts.Identity {
				transitions++
			}
			l.hold(le, now, true)
			le.Spec.LeaseTransitions = &transitions
			mark := le.Annotations[DirtyAnnotation]
			delete(le.Annotations, DirtyAnnotation) // the reconcile that follows covers it
			l.advertise(le)
			if err := l.c.Update(ctx, le); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("taking over the lease of %s: %w", key, err)
			}
			return l.afterTake(ctx, &Held{l: l, key: key, lease: le}, mark, forward)
		}
		elsewhere := heldElsewhere(key, le)
		if a := elsewhere.Address; forward != nil && a != "" && a != l.opts.Address && forward(a) {
			elsewhere.Forward = true
			return nil, elsewhere
		}
		if le.Annotations[DirtyAnnotation] != "" {
			return nil, elsewhere // marked already, and not cleared since: the holder will see it
		}
		if le.Annotations == nil {
			le.Annotations = map[string]string{}
		}
		le.Annotations[DirtyAnnotation] = l.opts.Identity
		if err := l.c.Update(ctx, le); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // renewed, released or marked meanwhile: look again
			}
			return nil, fmt.Errorf("marking the lease of %s for another reconcile: %w", key, err)
		}
		return nil, elsewhere
	}
	return nil, fmt.Errorf("taking the lease of %s: still contended after %d rounds", key, maxRounds)
}

// TakeOverIfAbandoned is Acquire for a check at a Lease's expiry: it takes
// the Lease only if it still exists and its holder is gone, and returns
// nil, nil if there is nothing to do (released: the holder reconciled the
// mark). A live holder gives *HeldElsewhere and no write: the mark that
// led to the check is on the Lease or was reconciled by the holder (a
// holder that clears a mark reconciles again before it lets go), so
// marking it again would only cost the holder a needless reconcile.
func (l *Locker) TakeOverIfAbandoned(ctx context.Context, key reconcile.Request) (*Held, error) {
	le := &coordinationv1.Lease{}
	if err := l.c.Get(ctx, l.objectKey(key), le); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the lease of %s: %w", key, err)
	}
	if !l.free(le, l.opts.Clock.Now()) {
		return nil, heldElsewhere(key, le)
	}
	return l.acquire(ctx, key, le, nil)
}

func heldElsewhere(key reconcile.Request, le *coordinationv1.Lease) *HeldElsewhere {
	return &HeldElsewhere{Key: key, Holder: holder(le), Expires: expiry(le), Address: le.Annotations[AddressAnnotation]}
}

// advertise records this instance's address on le, which it is taking.
func (l *Locker) advertise(le *coordinationv1.Lease) {
	switch {
	case l.opts.Address != "":
		if le.Annotations == nil {
			le.Annotations = map[string]string{}
		}
		le.Annotations[AddressAnnotation] = l.opts.Address
	case le.Annotations != nil:
		delete(le.Annotations, AddressAnnotation)
	}
}

// hold makes le this instance's, renewed now; taking sets acquireTime too.
func (l *Locker) hold(le *coordinationv1.Lease, now time.Time, taking bool) {
	id, secs, t := l.opts.Identity, int32((l.opts.Duration+time.Second-1)/time.Second), metav1.NewMicroTime(now)
	le.Spec.HolderIdentity, le.Spec.LeaseDurationSeconds = &id, &secs
	le.Spec.RenewTime = &t
	if taking {
		le.Spec.AcquireTime = &t
	}
}

// free: nobody holds le, its holder's renewal ran out, or it is ours.
func (l *Locker) free(le *coordinationv1.Lease, now time.Time) bool {
	h := holder(le)
	return h == "" || h == l.opts.Identity || !now.Before(expiry(le))
}

func holder(le *coordinationv1.Lease) string { return ptrOr(le.Spec.HolderIdentity, "") }

// expiry is when le's last renewal runs out.
func expiry(le *coordinationv1.Lease) time.Time {
	var renewed time.Time
	switch {
	case le.Spec.RenewTime != nil:
		renewed = le.Spec.RenewTime.Time
	case le.Spec.AcquireTime != nil:
		renewed = le.Spec.AcquireTime.Time
	}
	return renewed.Add(time.Duration(ptrOr(le.Spec.LeaseDurationSeconds, 0)) * time.Second)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Held is a Lease this instance holds. Its methods are safe to call from the
// reconciling goroutine and KeepAlive's at once.
type Held struct {
	l   *Locker
	key reconcile.Request

	mu    sync.Mutex
	lease *coordinationv1.Lease // as last written by us
	lost  bool
}

// Renew extends the Lease. It returns ErrLost if another instance took it.
func (h *Held) Renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return ErrLost
	}
	for range maxRounds {
		le := h.lease.DeepCopy()
		h.l.hold(le, h.l.opts.Clock.Now(), false)
		err := h.l.c.Update(ctx, le)
		if err == nil {
			h.lease = le
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renewing the lease of %s: %w", h.key, err)
		}
		if err := h.reread(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("renewing the lease of %s: still contended after %d rounds", h.key, maxRounds)
}

// Expires is when the Lease runs out unless renewed again.
func (h *Held) Expires() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return expiry(h.lease)
}

// Refresh renews the Lease unless its last renewal was less than a third
// of its duration ago, so that a reconcile that starts under a Lease kept
// from an earlier one has at least two thirds of the duration before
// KeepAlive must renew it (as a fresh Acquire would). ErrLost: another
// instance took it.
func (h *Held) Refresh(ctx context.Context) error {
	h.mu.Lock()
	fresh := h.l.opts.Clock.Now().Before(expiry(h.lease).Add(-h.l.opts.Duration * 2 / 3))
	lost := h.lost
	h.mu.Unlock()
	switch {
	case lost:
		return ErrLost
	case fresh:
		return nil
	}
	return h.Renew(ctx)
}

// reread loads the Lease after a conflict: marked dirty by another instance
// (still ours), or gone to another holder (ErrLost).
func (h *Held) reread(ctx context.Context) error {
	le := &coordinationv1.Lease{}
	err := h.l.c.Get(ctx, h.l.objectKey(h.key), le)
	if apierrors.IsNotFound(err) || err == nil && holder(le) != h.l.opts.Identity {
		h.lost = true
		return ErrLost
	}
	if err != nil {
		return fmt.Errorf("reading the lease of %s: %w", h.key, err)
	}
	h.lease = le
	return nil
}

// KeepAlive renews the Lease every third of its duration until the
// returned stop is called. If the Lease is lost, it calls lost once.
func (h *Held) KeepAlive(ctx context.Context, lost func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t := h.l.opts.Clock.NewTicker(h.l.opts.Duration / 3) // before KeepAlive returns: a fake clock stepped next ticks it
	go func() {
		defer close(done)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			if err := h.Renew(ctx); errors.Is(err, ErrLost) {
				lost(err)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Release lets the Lease go. If another instance marked it dirty since it
// was taken, Release clears the mark, keeps the Lease and returns true: the
// caller reconciles again and releases again. ErrLost means another
// instance took the Lease over (it will reconcile).
func (h *Held) Release(ctx context.Context) (dirty bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return false, ErrLost
	}
	for range maxRounds {
		if h.lease.Annotations[DirtyAnnotation] != "" {
			// Marked: known from a renewal's reread, or from the delete's
			// conflict below. Clear the mark and keep the Lease.
			le := h.lease.DeepCopy()
			delete(le.Annotations, DirtyAnnotation)
			h.l.hold(le, h.l.opts.Clock.Now(), false)
			err := h.l.c.Update(ctx, le)
			if err == nil {
				h.lease = le
				return true, nil
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("clearing the mark on the lease of %s: %w", h.key, err)
			}
			if err := h.reread(ctx); err != nil {
				return false, err
			}
			continue
		}
		rv, uid := h.lease.ResourceVersion, h.lease.UID
		err := h.l.c.Delete(ctx, h.lease, client.Preconditions{ResourceVersion: &rv, UID: &uid})
		switch {
		case err == nil:
			return false, nil
		case apierrors.IsNotFound(err):
			h.lost = true
			return false, ErrLost
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("releasing the lease of %s: %w", h.key, err)
		}
		if err := h.reread(ctx); err != nil { // marked meanwhile: cleared above
			return false, err
		}
	}
	return false, fmt.Errorf("releasing the lease of %s: still contended after %d rounds", h.key, maxRounds)
}

// Stale lists, paged, the keys whose Lease has expired: their holder died
// mid-reconcile (and perhaps with a reconcile owed to a dirty mark). A
// sweep reconciles them, which takes each Lease over and then deletes it.
func (l *Locker) Stale(ctx context.Context) ([]reconcile.Request, error) {
	now := l.opts.Clock.Now()
	var keys []reconcile.Request
	list := &coordinationv1.LeaseList{}
	for cont := ""; ; {
		if err := l.c.List(ctx, list, client.InNamespace(l.opts.Namespace), client.MatchingLabels{OperatorLabel: l.opts.Operator}, client.Limit(500), client.Continue(cont)); err != nil {
			return nil, fmt.Errorf("listing leases: %w", err)
		}
		for i := range list.Items {
			le := &list.Items[i]
			if !now.Before(expiry(le)) {
				if k, ok := parseKey(le.Annotations[KeyAnnotation]); ok {
					keys = append(keys, k)
				}
			}
		}
		if cont = list.Continue; cont == "" {
			return keys, nil
		}
	}
}

func parseKey(s string) (reconcile.Request, bool) {
	if s == "" {
		return reconcile.Request{}, false
	}
	ns, name, found := strings.Cut(s, "/")
	if !found {
		ns, name = "", s
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}, true
}
