package bucket

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Free says why Wait returned: which bucket this replica may take, and why.
type Free struct {
	Bucket int
	// Why is "missing" (no Lease), "released" (no holder), "own" (the
	// Lease names this replica: a restart in its pod) or "expired" (its
	// record unchanged for LeaseDuration as this replica observed it).
	Why    string
	Holder string // the holder of an expired Lease
}

// Wait is a light standby: it only reads the buckets' Leases, every
// RetryPeriod (jittered), until one of them may be taken, and returns it.
// It writes nothing and holds nothing, so a replica that calls it before
// Run keeps nothing of the Subscriptions open (no watch, no check) while
// another replica holds every bucket.
//
// What it observes is kept: Run, called next, judges an expiry from the
// same observations, so a bucket Wait found expired is taken at Run's
// first try, not a LeaseDuration later. A failed read is logged and tried
// again. It returns ctx's error when ctx ends first. held, if not nil, is
// called once, when a first round of reads found every bucket held: the
// replica stands by from then on.
func (e *Elector) Wait(ctx context.Context, held func()) (Free, error) {
	for {
		for _, b := range e.bs {
			if f, ok := e.free(ctx, b); ok {
				return f, nil
			}
			if ctx.Err() != nil {
				return Free{}, ctx.Err()
			}
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
