package wakeup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/backoff"
)

// Store writes the Wakeup records of one operator.
type Store struct {
	c        client.Client
	operator string
	target   schema.GroupVersionKind
	sink     string
	policy   backoff.Policy
	// Namespace holds records of cluster-scoped targets.
	namespace string
	clock     clock.PassiveClock

	mu    sync.Mutex
	clear map[reconcile.Request]bool // keys known to have no retry record; nil when Shared
	alone aloneView                  // Shared, while this instance runs alone (SetAlone)
	seed  sync.Mutex                 // one list of the records at a time (aloneClear)
}

// aloneView is what a Shared Store knows while its instance runs alone
// (SetAlone): no other instance reconciles the operator's keys, so the
// only records it does not write itself are those listed when it began
// (listed once, at the first Succeeded) and the Accepted records another
// instance writes to look again at the holder's Lease (lookAgain: such a
// record that a success here leaves in place fires once, one more
// reconcile, and the wakeup source deletes it).
type aloneView struct {
	on     bool
	gen    uint64                     // counts SetAlone calls
	listed uint64                     // gen whose records were listed (has is complete)
	failed uint64                     // gen whose list failed or had too many records
	has    map[reconcile.Request]bool // keys that may have a record (on)
}

// aloneListMax bounds the list of records when running alone begins:
// with more, each success looks (a GET) as when shared.
const aloneListMax = 500

// SetAlone tells a Shared Store whether its instance runs alone (holds
// the operator's sole Lease): while it does, Succeeded looks for a record
// only of keys that may have one. It does no I/O.
func (s *Store) SetAlone(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clear != nil {
		return // not shared: it knows already
	}
	s.alone.gen++
	s.alone.on, s.alone.has = on, nil
	if on {
		s.alone.has = map[reconcile.Request]bool{}
	}
}

// aloneClear reports whether key is known to have no record because this
// instance runs alone; the first call of a period lists the records,
// unless PrimeAlone did.
func (s *Store) aloneClear(ctx context.Context, key reconcile.Request) bool {
	a, ok := s.seedAlone(ctx)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alone.on && s.alone.gen == a.gen && s.alone.listed == a.gen && !s.alone.has[key]
}

// PrimeAlone lists the records now, while this instance runs alone and has
// not listed them for this period yet, so that the period's first
// Succeeded makes no list of its own: a cold-started instance calls it
// once it holds the sole Lease, before its first event (serverless
// Engine.Warm). It does nothing otherwise, or when not Shared.
func (s *Store) PrimeAlone(ctx context.Context) { s.seedAlone(ctx) }

// seedAlone lists the records once per period of running alone (one list
// at a time); ok: running alone, and the list of this period did not fail.
func (s *Store) seedAlone(ctx context.Context) (aloneView, bool) {
	s.mu.Lock()
	a := s.alone
	s.mu.Unlock()
	if !a.on || a.failed == a.gen {
		return a, false
	}
	if a.listed != a.gen {
		s.seed.Lock()
		defer s.seed.Unlock()
		s.mu.Lock()
		a = s.alone
		s.mu.Unlock()
		if a.listed != a.gen && a.failed != a.gen {
			keys, err := s.listTargets(ctx)
			s.mu.Lock()
			if s.alone.on && s.alone.gen == a.gen {
				if err != nil {
					s.alone.failed = a.gen
				} else {
					for _, k := range keys {
						s.alone.has[k] = true
					}
					s.alone.listed = a.gen
				}
			}
			s.mu.Unlock()
		}
	}
	return a, true
}

// listTargets lists the keys with a record, up to aloneListMax.
func (s *Store) listTargets(ctx context.Context) ([]reconcile.Request, error) {
	list := &v1alpha1.WakeupList{}
	if err := s.c.List(ctx, list, client.MatchingLabels{OperatorLabel: s.operator}, client.Limit(aloneListMax)); err != nil {
		return nil, fmt.Errorf("listing wakeups: %w", err)
	}
	if list.Continue != "" {
		return nil, fmt.Errorf("more than %d wakeups", aloneListMax)
	}
	keys := make([]reconcile.Request, 0, len(list.Items))
	for _, w := range list.Items {
		keys = append(keys, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Spec.Target.Namespace, Name: w.Spec.Target.Name}})
	}
	return keys, nil
}

// StoreOptions configures a Store.
type StoreOptions struct {
	Operator string
	Target   schema.GroupVersionKind
	// Sink is where the wakeup source delivers (the operator's URL).
	Sink      string
	Policy    backoff.Policy
	Namespace string
	// Clock stamps due times (the wall clock if nil). Tests pass
	// k8s.io/utils/clock/testing's FakeClock.
	Clock clock.PassiveClock
	// Shared: other instances write records of the same keys, so this one
	// cannot know that a key has none (Succeeded always looks).
	Shared bool
}

// NewStore returns a Store writing through c.
func NewStore(c client.Client, o StoreOptions) *Store {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Namespace == "" {
		o.Namespace = metav1.NamespaceDefault
	}
	s := &Store{c: c, operator: o.Operator, target: o.Target, sink: o.Sink, policy: o.Policy,
		namespace: o.Namespace, clock: o.Clock}
	if !o.Shared {
		s.clear = map[reconcile.Request]bool{}
	}
	return s
}

// Name is the record name for key: one per operator and key.
func Name(operator string, key types.NamespacedName) string {
	sum := sha256.Sum256([]byte(key.Namespace + "/" + key.Name))
	n := operator
	if len(n) > 40 {
		n = n[:40]
	}
	return n + "-" + hex.EncodeToString(sum[:8])
}

func (s *Store) objectKey(key reconcile.Request) client.ObjectKey {
	ns := key.Namespace
	if ns == "" {
		ns = s.namespace
	}
	return client.ObjectKey{Namespace: ns, Name: Name(s.operator, key.NamespacedName)}
}

// Requeue records, after a successful reconcile, that key must be
// reconciled again after d.
func (s *Store) Requeue(ctx context.Context, key reconcile.Request, d time.Duration) error {
	now := s.clock.Now()
	due := now.Add(d)
	_, err := s.upsert(ctx, key, func(w *v1alpha1.Wakeup, exists bool) bool {
		// It follows a success: a pending retry is replaced; an earlier
		// RequeueAfter is kept (earliest wins).
		if pending(w, exists, now) && w.Spec.Reason == v1alpha1.ReasonRequeueAfter && !w.Spec.Due.Time.After(due) {
			return false
		}
		w.Spec.Due, w.Spec.Reason, w.Spec.Attempts = metav1.NewMicroTime(due), v1alpha1.ReasonRequeueAfter, 0
		return true
	})
	if err == nil {
		s.setClear(key, false)
	}
	return err
}

// retryEarly is how long before a pending retry is due a failure counts
// as the retry's own (the hub's and the operator's clocks may differ by
// that much).
const retryEarly = 250 * time.Millisecond

// Failed counts a failure of key and records its retry after the backoff
// for the stored attempt count (earliest wins). It returns the delay until
// the record is due and the attempt number used. A failure while a retry
// is pending, more than retryEarly before it is due (the reconcile of an
// event that came first, most often the echo of the failed reconcile's
// own status write), writes nothing: the backoff grows by the retries'
// failures, not by events.
func (s *Store) Failed(ctx context.Context, key reconcile.Request) (time.Duration, int, error) {
	now := s.clock.Now()
	var delay time.Duration
	var attempt int
	_, err := s.upsert(ctx, key, func(w *v1alpha1.Wakeup, exists bool) bool {
		attempt = int(w.Spec.Attempts)
		if exists && w.Spec.Reason == v1alpha1.ReasonRetry && attempt > 0 && w.Spec.Due.Time.Sub(now) > retryEarly {
			delay, attempt = w.Spec.Due.Time.Sub(now), attempt-1
			return false
		}
		delay = s.policy.Delay(attempt)
		due := now.Add(delay)
		w.Spec.Attempts++
		if !pending(w, exists, now) || due.Before(w.Spec.Due.Time) {
			w.Spec.Due, w.Spec.Reason = metav1.NewMicroTime(due), v1alpha1.ReasonRetry
		} else {
			delay = w.Spec.Due.Time.Sub(now)
		}
		return true
	})
	if err == nil {
		s.setClear(key, false)
	}
	return delay, attempt, err
}

// Succeeded deletes key's pending retry or async acceptance, if any: a later
// success cancels a pending retry. A RequeueAfter record stays. Keys known to have no retry
// record cost no API call.
func (s *Store) Succeeded(ctx context.Context, key reconcile.Request) error {
	if s.isClear(key) || s.aloneClear(ctx, key) {
		return nil
	}
	w := &v1alpha1.Wakeup{}
	err := s.c.Get(ctx, s.objectKey(key), w)
	switch {
	case apierrors.IsNotFound(err):
		s.setClear(key, true)
		return nil
	case err != nil:
		return fmt.Errorf("reading the wakeup of %s: %w", key, err)
	case w.Spec.Reason != v1alpha1.ReasonRetry && w.Spec.Reason != v1alpha1.ReasonAccepted:
		if w.Spec.Attempts > 0 { // a success resets the backoff
			w.Spec.Attempts = 0
			if w.Labels == nil {
				w.Labels = map[string]string{}
			}
			w.Labels[DueBucketLabel] = DueBucket(w.Spec.Due.Time)
			return client.IgnoreNotFound(s.c.Update(ctx, w))
		}
		return nil
	}
	err = s.c.Delete(ctx, w, client.Preconditions{ResourceVersion: &w.ResourceVersion})
	switch {
	case apierrors.IsConflict(err):
		return nil // written again meanwhile: a record stays
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("cancelling the retry of %s: %w", key, err)
	}
	s.setClear(key, true)
	return nil
}

// Gone deletes key's record whatever it holds (a RequeueAfter, a retry, an
// acceptance): the reconciled object no longer exists, so nothing is left
// to wake the operator for, and no record outlives it.
func (s *Store) Gone(ctx context.Context, key reconcile.Request) error {
	w := &v1alpha1.Wakeup{}
	w.Namespace, w.Name = s.objectKey(key).Namespace, s.objectKey(key).Name
	if err := s.c.Delete(ctx, w); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the wakeup of %s, whose object is gone: %w", key, err)
	}
	s.setClear(key, true)
	return nil
}

// upsert reads key's record, lets mutate change it (returning false to keep
// it as is) and writes it, retrying on conflicts.
func (s *Store) upsert(ctx context.Context, key reconcile.Request, mutate func(w *v1alpha1.Wakeup, exists bool) bool) (*v1alpha1.Wakeup, error) {
	ok := s.objectKey(key)
	var w *v1alpha1.Wakeup
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		w = &v1alpha1.Wakeup{}
		err := s.c.Get(ctx, ok, w)
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if !exists {
			w = &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ok.Namespace, Name: ok.Name,
				Labels: map[string]string{OperatorLabel: s.operator}}}
			w.Spec.Operator, w.Spec.Sink = s.operator, s.sink
			w.Spec.Target = v1alpha1.Target{APIVersion: s.target.GroupVersion().String(), Kind: s.target.Kind, Namespace: key.Namespace, Name: key.Name}
		}
		if !mutate(w, exists) {
			return nil
		}
		w.Spec.Sink = s.sink
		if w.Labels == nil {
			w.Labels = map[string]string{}
		}
		w.Labels[DueBucketLabel] = DueBucket(w.Spec.Due.Time) // the source lists by it
		if exists {
			return s.c.Update(ctx, w)
		}
		return s.c.Create(ctx, w)
	})
	if err != nil {
		return nil, fmt.Errorf("recording the wakeup of %s: %w", key, err)
	}
	return w, nil
}

func (s *Store) isClear(key reconcile.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clear[key]
}

func (s *Store) setClear(key reconcile.Request, clear bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clear == nil { // shared
		if s.alone.has != nil {
			if clear {
				delete(s.alone.has, key)
			} else {
				s.alone.has[key] = true
			}
		}
		return
	}
	if !clear {
		delete(s.clear, key)
		return
	}
	if len(s.clear) >= 100_000 {
		s.clear = map[reconcile.Request]bool{}
	}
	s.clear[key] = true
}

// pending reports whether an existing record is still to fire. One whose
// due time has passed is being delivered (this reconcile may be its
// delivery): a new due time replaces it.
func pending(w *v1alpha1.Wakeup, exists bool, now time.Time) bool {
	return exists && w.Spec.Due.Time.After(now)
}

// Overdue lists the keys whose wakeups are past due (a sweep's safety net
// for a wakeup source that was down), paged.
func (s *Store) Overdue(ctx context.Context) ([]reconcile.Request, error) {
	now := s.clock.Now()
	var keys []reconcile.Request
	list := &v1alpha1.WakeupList{}
	for cont := ""; ; {
		if err := s.c.List(ctx, list, client.MatchingLabels{OperatorLabel: s.operator}, client.Limit(500), client.Continue(cont)); err != nil {
			return nil, fmt.Errorf("listing wakeups: %w", err)
		}
		for _, w := range list.Items {
			if !w.Spec.Due.Time.After(now) {
				keys = append(keys, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Spec.Target.Namespace, Name: w.Spec.Target.Name}})
			}
		}
		if cont = list.Continue; cont == "" {
			return keys, nil
		}
	}
}

// Accept records, in async mode, that an event for key was accepted: if
// the reconcile has not succeeded within grace, the wakeup source delivers
// it again. An earlier pending wakeup is kept.
func (s *Store) Accept(ctx context.Context, key reconcile.Request, grace time.Duration) error {
	now := s.clock.Now()
	due := now.Add(grace)
	_, err := s.upsert(ctx, key, func(w *v1alpha1.Wakeup, exists bool) bool {
		if pending(w, exists, now) && !w.Spec.Due.Time.After(due) {
			return false
		}
		w.Spec.Due, w.Spec.Reason = metav1.NewMicroTime(due), v1alpha1.ReasonAccepted
		return true
	})
	if err == nil {
		s.setClear(key, false)
	}
	return err
}
