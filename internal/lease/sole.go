package lease

import (
	"context"
	"errors"
	"fmt"
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

// One instance alone (Options.Sole).
//
// Per-key Leases cost two writes per key, which double the API requests
// of an operator that converges many objects at once (each reconciled
// once: a status write, and a Lease's create and delete). Most of the
// time one instance runs: the opzero hub sends a Subscription's events
// at a concurrency under Knative's default target, so Knative does not
// scale out. The sole Lease (SoleName) lets that instance hold every key
// at once, in one Lease instead of one per key:
//
//   - AcquireSole creates (or takes over, if its holder's renewal ran
//     out) the sole Lease, then lists the operator's per-key Leases: if
//     another instance holds a live one, it deletes the sole Lease again
//     and returns ErrShared (the caller uses per-key Leases).
//   - Acquire of a per-key Lease, once it is taken (created or taken
//     over), reads the sole Lease: if another live instance holds it,
//     the per-key Lease is let go again and Acquire returns
//     *HeldElsewhere with Sole set (the caller must not reconcile).
//
// Each side writes its own Lease, then reads the other's; writes and reads
// are linearizable (etcd through the API server, reads without a
// resourceVersion), so of two instances that do this at once at least one
// sees the other's Lease and backs off: never a sole holder and another
// instance's per-key Lease both live. (Both may back off; they try again
// later.)
//
// An instance that finds the sole Lease held by another live instance
// marks it wanted (WantedAnnotation, one write): the holder's next renewal
// finds the mark, and the holder steps down (it lets its runs end, then
// deletes the sole Lease) so that both can run with per-key Leases. A
// sole Lease costs its create, a renewal every third of its duration and
// its delete, however many keys are reconciled under it.
const (
	// SoleAnnotation marks an operator's sole Lease.
	SoleAnnotation = "opzero.dev/sole"
	// WantedAnnotation on the sole Lease names an instance waiting to
	// reconcile: the holder steps down.
	WantedAnnotation = "opzero.dev/wanted"
)

// ErrShared is returned by AcquireSole when another instance holds a live
// per-key Lease: this one must use per-key Leases too.
var ErrShared = errors.New("lease: another instance holds a key's Lease; per-key Leases it is")

// SoleName is the name of operator's sole Lease.
func SoleName(operator string) string {
	n := operator
	if len(n) > 40 {
		n = n[:40]
	}
	return n + "-sole"
}

func (l *Locker) soleKey() client.ObjectKey {
	return client.ObjectKey{Namespace: l.opts.Namespace, Name: SoleName(l.opts.Operator)}
}

// soleRequest stands for every key in HeldElsewhere.
var soleRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "*"}}

// SoleHeld is the sole Lease as this instance holds it. Safe for
// concurrent use.
type SoleHeld struct {
	l *Locker

	mu    sync.Mutex
	lease *coordinationv1.Lease // as last written by us
	lost  bool
}

// AcquireSole takes the operator's sole Lease for this instance: every key
// is then this instance's to reconcile, without per-key Leases, until it
// releases it (or loses it: its renewals stopped for the Lease's
// duration). It returns *HeldElsewhere (Sole set, Key "*") when another
// live instance holds it, after marking it wanted; ErrShared when another
// instance holds a live per-key Lease.
func (l *Locker) AcquireSole(ctx context.Context) (*SoleHeld, error) {
	return l.acquireSole(ctx, true)
}

// TakeSoleIfFree is AcquireSole without asking: when another live
// instance holds the sole Lease it returns *HeldElsewhere having written
// nothing, so its holder goes on running alone. A cold-started instance
// takes the sole Lease with it before its first event, while Knative
// probes the pod (serverless Engine.Warm).
func (l *Locker) TakeSoleIfFree(ctx context.Context) (*SoleHeld, error) {
	return l.acquireSole(ctx, false)
}

// acquireSole takes the sole Lease; ask: mark it wanted if held elsewhere.
func (l *Locker) acquireSole(ctx context.Context, ask bool) (*SoleHeld, error) {
	ok := l.soleKey()
	for range maxRounds {
		now := l.opts.Clock.Now()
		le := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ok.Namespace, Name: ok.Name,
			Labels:      map[string]string{OperatorLabel: l.opts.Operator},
			Annotations: map[string]string{SoleAnnotation: "true"}}}
		l.hold(le, now, true)
		l.advertise(le)
		err := l.c.Create(ctx, le)
		switch {
		case err == nil:
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("taking the sole lease: %w", err)
		default:
			if err := l.c.Get(ctx, ok, le); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("reading the sole lease: %w", err)
			}
			if !l.free(le, now) {
				he := heldElsewhere(soleRequest, le)
				he.Sole = true
				if !ask || le.Annotations[WantedAnnotation] != "" {
					return nil, he // not to ask, or asked already
				}
				if le.Annotations == nil {
					le.Annotations = map[string]string{}
				}
				le.Annotations[WantedAnnotation] = l.opts.Identity
				if err := l.c.Update(ctx, le); err != nil {
					if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
						continue
					}
					return nil, fmt.Errorf("asking the holder of the sole lease to step down: %w", err)
				}
				return nil, he
			}
			transitions := ptrOr(le.Spec.LeaseTransitions, 0)
			if holder(le) != l.opts.Identity {
				transitions++
			}
			l.hold(le, now, true)
			le.Spec.LeaseTransitions = &transitions
			delete(le.Annotations, WantedAnnotation) // whoever wanted it finds it taken again, and asks again
			l.advertise(le)
			if err := l.c.Update(ctx, le); err != nil {
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("taking over the sole lease: %w", err)
			}
		}
		s := &SoleHeld{l: l, lease: le}
		busy, err := l.othersHoldKeys(ctx)
		if err == nil && !busy {
			return s, nil
		}
		rel, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		rerr := s.Release(rel)
		cancel()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("listing the per-key leases: %w", err), rerr)
		}
		if rerr != nil && !errors.Is(rerr, ErrLost) {
			return nil, errors.Join(ErrShared, rerr)
		}
		return nil, ErrShared
	}
	return nil, fmt.Errorf("taking the sole lease: still contended after %d rounds", maxRounds)
}

// othersHoldKeys reports whether another instance holds a live per-key
// Lease of the operator (a list without a resourceVersion: it sees every
// Lease created before it).
func (l *Locker) othersHoldKeys(ctx context.Context) (bool, error) {
	list := &coordinationv1.LeaseList{}
	for cont := ""; ; {
		if err := l.c.List(ctx, list, client.InNamespace(l.opts.Namespace), client.MatchingLabels{OperatorLabel: l.opts.Operator}, client.Limit(500), client.Continue(cont)); err != nil {
			return false, err
		}
		now := l.opts.Clock.Now()
		for i := range list.Items {
			le := &list.Items[i]
			if le.Annotations[KeyAnnotation] != "" && holder(le) != l.opts.Identity && now.Before(expiry(le)) {
				return true, nil
			}
		}
		if cont = list.Continue; cont == "" {
			return false, nil
		}
	}
}

// soleElsewhere reads the sole Lease: *HeldElsewhere (Sole set) if another
// live instance holds it, which is then marked wanted; nil if nobody does.
func (l *Locker) soleElsewhere(ctx context.Context) (*HeldElsewhere, error) {
	for range maxRounds {
		le := &coordinationv1.Lease{}
		if err := l.c.Get(ctx, l.soleKey(), le); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading the sole lease: %w", err)
		}
		if l.free(le, l.opts.Clock.Now()) {
			return nil, nil
		}
		he := heldElsewhere(soleRequest, le)
		he.Sole = true
		if le.Annotations[WantedAnnotation] != "" {
			return he, nil
		}
		if le.Annotations == nil {
			le.Annotations = map[string]string{}
		}
		le.Annotations[WantedAnnotation] = l.opts.Identity
		err := l.c.Update(ctx, le)
		if err == nil {
			return he, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("asking the holder of the sole lease to step down: %w", err)
		}
	}
	return nil, fmt.Errorf("reading the sole lease: still contended after %d rounds", maxRounds)
}

// Renew extends the sole Lease. wanted: another instance asked for it
// (WantedAnnotation); the caller steps down. ErrLost: another instance
// took it (this one's renewals had stopped for its duration).
func (s *SoleHeld) Renew(ctx context.Context) (wanted bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost {
		return false, ErrLost
	}
	for range maxRounds {
		le := s.lease.DeepCopy()
		s.l.hold(le, s.l.opts.Clock.Now(), false)
		err := s.l.c.Update(ctx, le)
		if err == nil {
			s.lease = le
			return le.Annotations[WantedAnnotation] != "", nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("renewing the sole lease: %w", err)
		}
		if err := s.reread(ctx); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("renewing the sole lease: still contended after %d rounds", maxRounds)
}

// reread loads the sole Lease after a conflict: marked wanted (still
// ours), or gone to another holder (ErrLost).
func (s *SoleHeld) reread(ctx context.Context) error {
	le := &coordinationv1.Lease{}
	err := s.l.c.Get(ctx, s.l.soleKey(), le)
	if apierrors.IsNotFound(err) || err == nil && holder(le) != s.l.opts.Identity {
		s.lost = true
		return ErrLost
	}
	if err != nil {
		return fmt.Errorf("reading the sole lease: %w", err)
	}
	s.lease = le
	return nil
}

// Expires is when the sole Lease runs out unless renewed again.
func (s *SoleHeld) Expires() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return expiry(s.lease)
}

// Release deletes the sole Lease (a wanted mark does not stop it: the
// instance that wanted it takes it, or per-key Leases).
func (s *SoleHeld) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost {
		return ErrLost
	}
	for range maxRounds {
		rv, uid := s.lease.ResourceVersion, s.lease.UID
		err := s.l.c.Delete(ctx, s.lease, client.Preconditions{ResourceVersion: &rv, UID: &uid})
		switch {
		case err == nil:
			s.lost = true // released: nothing more to renew
			return nil
		case apierrors.IsNotFound(err):
			s.lost = true
			return ErrLost
		case !apierrors.IsConflict(err):
			return fmt.Errorf("releasing the sole lease: %w", err)
		}
		if err := s.reread(ctx); err != nil { // marked wanted meanwhile
			return err
		}
	}
	return fmt.Errorf("releasing the sole lease: still contended after %d rounds", maxRounds)
}

// afterTake is the other half of the exclusion (Options.Sole): h, a
// per-key Lease just taken, is let go again if another live instance holds
// the sole Lease, and *HeldElsewhere (Sole set; Forward if forward takes
// the holder's address) is returned instead. mark is the dirty mark the
// take cleared ("" none): it is written back, so that the reconcile it
// asks for is not lost (the Lease then expires unrenewed, and whoever
// looks at it next takes it over with the mark); a Lease marked since it
// was taken is left to expire the same way.
func (l *Locker) afterTake(ctx context.Context, h *Held, mark string, forward func(string) bool) (*Held, error) {
	if !l.opts.Sole {
		return h, nil
	}
	he, err := l.soleElsewhere(ctx)
	if err == nil && he == nil {
		return h, nil
	}
	rel, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	h.letGo(rel, mark)
	if err != nil {
		return nil, err
	}
	he.Key = h.key
	if a := he.Address; forward != nil && a != "" && a != l.opts.Address && forward(a) {
		he.Forward = true
	}
	return nil, he
}

// letGo gives up a Lease this instance took but will not use: deleted if
// unchanged since, else left to expire; with mark, the mark is written
// back instead and the Lease left to expire.
func (h *Held) letGo(ctx context.Context, mark string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost = true // nothing more is renewed
	if mark == "" {
		rv, uid := h.lease.ResourceVersion, h.lease.UID
		_ = h.l.c.Delete(ctx, h.lease, client.Preconditions{ResourceVersion: &rv, UID: &uid})
		return
	}
	le := h.lease.DeepCopy()
	le.Annotations[DirtyAnnotation] = mark
	_ = h.l.c.Update(ctx, le) // a conflict: marked again since, which serves as well
}

// Clock is the Locker's clock.
func (l *Locker) Clock() clock.WithTicker { return l.opts.Clock }

// Sole reports whether instances may run alone (Options.Sole).
func (l *Locker) Sole() bool { return l.opts.Sole }
