package bucket

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Free says why Wait returned: which bucket this replica took or holds,
// and why it was free.
type Free struct {
	Bucket int
	// Why is "missing" (no Lease), "released" (no holder), "own" (the
	// Lease names this replica: a restart in its pod) or "expired" (its
	// record unchanged for LeaseDuration as this replica observed it).
	Why    string
	Holder string // the holder of an expired Lease
}

// Wait is a light standby: it only reads the buckets' Leases, every
// RetryPeriod (jittered), and returns once this replica is to serve: it
// took bucket 0 (missing, released, or unchanged for LeaseDuration as
// this replica observed it; taken as Run takes a bucket, so of two
// replicas that wait together one wins it and the other stands by), or a
// Lease names this replica (a restart in its pod). Meanwhile it holds
// nothing else, so a replica that calls it before Run keeps nothing of
// the Subscriptions open (no watch, no check) while another serves: the
// holder of bucket 0 takes the other buckets as they come free, which is
// why two replicas started together end as one that serves and one that
// stands by, not two that serve half each.
//
// What it observes of every bucket is kept: Run, called next, judges an
// expiry from the same observations, so a bucket Wait found expired is
// taken at Run's first try, not a LeaseDuration later. A failed read is
// logged and tried again. It returns ctx's error when ctx ends first.
// held, if not nil, is called once, when a first round found bucket 0
// held by another replica: the replica stands by from then on.
func (e *Elector) Wait(ctx context.Context, held func()) (Free, error) {
	lead := e.bs[0]
	for {
		var first Free
		leadFree := false
		for _, b := range e.bs {
			f, ok := e.free(ctx, b)
			if ctx.Err() != nil {
				return Free{}, ctx.Err()
			}
			switch {
			case ok && f.Why == "own":
				return f, nil
			case ok && b == lead:
				first, leadFree = f, true
			}
		}
		if leadFree {
			e.step(ctx, lead) // acquire it as Run would: one replica wins
			if e.Holds(lead.i) {
				return first, nil
			}
		}
		if ctx.Err() != nil {
			return Free{}, ctx.Err()
		}
		if held != nil {
			held()
			held = nil
		}
		wait := e.o.RetryPeriod + jitter(e.o.RetryPeriod)
		select {
		case <-ctx.Done():
			return Free{}, ctx.Err()
		case <-e.o.Clock.After(wait):
		}
	}
}

// free reads b's Lease once and says whether this replica may take it.
func (e *Elector) free(ctx context.Context, b *state) (Free, bool) {
	rctx, cancel := context.WithTimeout(ctx, e.o.RenewDeadline)
	defer cancel()
	u, err := e.leases.Get(rctx, b.name, metav1.GetOptions{})
	now := e.o.Clock.Now()
	switch {
	case apierrors.IsNotFound(err):
		return Free{Bucket: b.i, Why: "missing"}, true
	case err != nil:
		if ctx.Err() == nil {
			e.o.Log.Error(err, "standing by: reading the bucket's Lease failed; trying again", "bucket", b.i, "lease", e.o.Namespace+"/"+b.name)
		}
		return Free{}, false
	}
	rec := readRecord(u)
	e.saw(b, rec, now)
	e.mu.Lock()
	since := b.seenAt
	e.mu.Unlock()
	switch {
	case rec.holder == "":
		return Free{Bucket: b.i, Why: "released"}, true
	case rec.holder == e.o.Identity:
		return Free{Bucket: b.i, Why: "own"}, true
	case !now.Before(since.Add(e.o.LeaseDuration)):
		return Free{Bucket: b.i, Why: "expired", Holder: rec.holder}, true
	}
	e.notice(b, rec)
	return Free{}, false
}

// jitter is up to a fifth of d, so that replicas started together do not
// read in step.
func jitter(d time.Duration) time.Duration { return time.Duration(rand.Int64N(int64(d)/5 + 1)) }
