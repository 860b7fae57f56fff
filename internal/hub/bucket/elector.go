// Package bucket spreads the opzero hub's Subscriptions over its replicas,
// as knative/pkg's bucketed leader election does for a controller's keys:
// each Subscription's namespace/name hashes into one of N buckets (Of, a
// consistent hash), and bucket i is held by the replica that holds the
// Lease <name>-<i> (coordination.k8s.io) in the hub's namespace.
//
// # Expected flow
//
// Every replica runs an Elector. For each bucket it tries, every
// RetryPeriod (jittered), to acquire the Lease or, once it holds it, to
// renew it: a read and an optimistic update (the resourceVersion read is
// the precondition, so of two replicas trying at once one wins). A Lease
// held by another replica is taken over once its record has not changed
// for LeaseDuration as this replica observed it (its own clock, never the
// holder's renewTime: clocks of two nodes need not agree), or at once when
// its holder released it (holderIdentity empty). OnChange tells the hub
// each bucket won or lost; the hub serves the Subscriptions of the buckets
// held. When Run's context ends, every Lease held is released (holder
// emptied, as client-go's ReleaseOnCancel does): the hub has written its
// progress by then, and another replica takes the buckets at its next try.
//
// # Guarantees
//
//   - One holder at a time, as far as the clocks' rates agree: a holder
//     that cannot renew for RenewDeadline gives the bucket up (OnChange)
//     before another replica may take it (LeaseDuration, longer, after the
//     last renewal it observed).
//   - Bad input stays local: a Lease edited by hand (holder set to a
//     name no replica has, or deleted) is logged saying so; a deleted Lease
//     is written again by its holder, a garbage holder loses the bucket
//     once it has not renewed it for LeaseDuration; the other buckets are
//     untouched.
//   - Each Lease carries its holder's hub version and bucket count
//     (annotations): a replica logs, once per holder, a bucket held by
//     another version or by a replica that counts buckets differently.
//
// # Caveats
//
//   - client-go's tools/leaderelection is not used: it links the typed
//     clientset and every informer, which the hub's dependency budget
//     forbids (internal/depcheck). This is the same protocol on the dynamic
//     client, without its coordinated-election mode.
//   - Buckets are not balanced: whichever replica tries first takes a free
//     bucket, so a replica that starts alone holds them all and the next
//     one is a hot standby until a hand-off.
package bucket

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
)

// Options configures an Elector.
type Options struct {
	Namespace string // of the Leases
	Name      string // the Leases are <Name>-<i>
	Buckets   int
	// Identity is this replica's holder identity: unique per process
	// (pod name and a random suffix), so that a restarted process waits
	// for its predecessor's Leases to expire or be released.
	Identity string
	Version  string // the hub's version, written on the Leases
	// LeaseDuration (10 s), RenewDeadline (7 s) and RetryPeriod (2 s) as
	// in client-go's leader election: a SIGKILLed holder's buckets are
	// taken between LeaseDuration and LeaseDuration+2*RetryPeriod after
	// its last renewal.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// OnChange is called, from the bucket's goroutine, when bucket i is
	// won (held) or lost; it must not block for long.
	OnChange func(i int, held bool)
	Log      logr.Logger
	Clock    clock.Clock
}

// Elector holds what Leases it can of the buckets: see the package
// documentation.
type Elector struct {
	o      Options
	leases dynamic.ResourceInterface

	mu sync.Mutex
	bs []*state
}

// state is one bucket as this replica knows it.
type state struct {
	i    int
	name string

	held    bool
	tried   bool      // an answer was had: held, or held by another
	renewed time.Time // the last acquire or renewal that succeeded
	seen    record    // the Lease as last read or written
	seenAt  time.Time // when seen last changed
	warned  string    // the holder (and version) last logged about
	handoff string    // found on the Lease when it was acquired from a release
	release string    // to write on the Lease when releasing it
}

// Status is one bucket as this replica knows it.
type Status struct {
	Bucket  int    `json:"bucket"`
	Lease   string `json:"lease"`
	Held    bool   `json:"held"`
	Holder  string `json:"holder,omitempty"`
	Version string `json:"version,omitempty"`
}

// New returns an Elector of the Leases in o.Namespace.
func New(d dynamic.Interface, o Options) *Elector {
	if o.Buckets < 1 {
		o.Buckets = 1
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 10 * time.Second
	}
	if o.RenewDeadline <= 0 || o.RenewDeadline >= o.LeaseDuration {
		o.RenewDeadline = o.LeaseDuration * 7 / 10
	}
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.OnChange == nil {
		o.OnChange = func(int, bool) {}
	}
	e := &Elector{o: o, leases: d.Resource(leasesGVR).Namespace(o.Namespace)}
	for i := range o.Buckets {
		e.bs = append(e.bs, &state{i: i, name: LeaseName(o.Name, i)})
	}
	return e
}

// LeaseName is the name of bucket i's Lease.
func LeaseName(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }

// RetryPeriod is how often each bucket's Lease is tried (or, standing
// by, read).
func (e *Elector) RetryPeriod() time.Duration { return e.o.RetryPeriod }

// Buckets is how many buckets there are.
func (e *Elector) Buckets() int { return e.o.Buckets }

// Holds reports whether this replica holds bucket i.
func (e *Elector) Holds(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return i >= 0 && i < len(e.bs) && e.bs[i].held
}

// Held lists the buckets held, in order.
func (e *Elector) Held() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int
	for _, b := range e.bs {
		if b.held {
			out = append(out, b.i)
		}
	}
	return out
}

// Handoff is the HandoffAnnotation of bucket i's Lease when this replica
// acquired it from a holder that released it; "" when it took it over
// after an expiry (or found it new).
func (e *Elector) Handoff(i int) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.bs) {
		return ""
	}
	return e.bs[i].handoff
}

// SetHandoff sets what releasing bucket i's Lease writes as its
// HandoffAnnotation.
func (e *Elector) SetHandoff(i int, rv string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i >= 0 && i < len(e.bs) {
		e.bs[i].release = rv
	}
}

// Tried reports whether every bucket was tried once: held, or found held
// by another replica.
func (e *Elector) Tried() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.bs {
		if !b.tried {
			return false
		}
	}
	return true
}

// Status lists the buckets as this replica last saw their Leases.
func (e *Elector) Status() []Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Status, 0, len(e.bs))
	for _, b := range e.bs {
		out = append(out, Status{Bucket: b.i, Lease: b.name, Held: b.held, Holder: b.seen.holder, Version: b.seen.version})
	}
	return out
}

// OtherVersions is how many buckets are held, as last seen, by a holder
// whose version is not this replica's (or that wrote none).
func (e *Elector) OtherVersions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, b := range e.bs {
		if !b.held && b.seen.holder != "" && b.seen.version != e.o.Version {
			n++
		}
	}
	return n
}

// Run tries for every bucket until ctx ends, then releases the Leases it
// holds.
func (e *Elector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	order := rand.Perm(len(e.bs)) // two replicas that start together split the buckets
	for _, i := range order {
		b := e.bs[i]
		wg.Add(1)
		go func() { defer wg.Done(); e.loop(ctx, b) }()
	}
	wg.Wait()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.RenewDeadline)
	defer cancel()
	for _, b := range e.bs {
		wg.Add(1)
		go func() { defer wg.Done(); e.release(rctx, b) }()
	}
	wg.Wait()
}

func (e *Elector) loop(ctx context.Context, b *state) {
	for ctx.Err() == nil {
		e.step(ctx, b)
		wait := e.o.RetryPeriod + jitter(e.o.RetryPeriod)
		select {
		case <-ctx.Done():
		case <-e.o.Clock.After(wait):
		}
	}
}

// heldElsewhere: another replica holds the bucket.
type heldElsewhere struct{ holder string }

func (h heldElsewhere) Error() string { return "held by " + h.holder }

// step acquires or renews b once and reports a change.
func (e *Elector) step(ctx context.Context, b *state) {
	rctx, cancel := context.WithTimeout(ctx, e.o.RenewDeadline)
	err := e.try(rctx, b)
	cancel()
	if ctx.Err() != nil {
		return // stopping: Run releases what is held
	}
	now := e.o.Clock.Now()
	var other heldElsewhere
	e.mu.Lock()
	was := b.held
	switch {
	case err == nil:
		b.held, b.renewed, b.tried = true, now, true
	case errors.As(err, &other):
		b.held, b.tried = false, true
	case b.held && now.Sub(b.renewed) >= e.o.RenewDeadline:
		b.held = false
	}
	held := b.held
	e.mu.Unlock()
	log := e.o.Log.WithValues("bucket", b.i, "lease", e.o.Namespace+"/"+b.name)
	switch {
	case held && !was:
		log.Info("bucket won: serving its Subscriptions")
	case was && !held && other.holder != "":
		log.Info("bucket lost: its Lease names another holder (edited by hand, or taken over after this replica's renewals failed); its Subscriptions are no longer served here", "holder", other.holder)
	case was && !held:
		log.Error(err, "bucket lost: the Lease could not be renewed within the renew deadline; its Subscriptions are no longer served here", "deadline", e.o.RenewDeadline)
	case err != nil && other.holder == "":
		log.Error(err, "acquiring or renewing the bucket's Lease failed; trying again")
	}
	if held != was {
		e.o.OnChange(b.i, held)
	}
}

// try reads b's Lease and acquires or renews it.
func (e *Elector) try(ctx context.Context, b *state) error {
	u, err := e.leases.Get(ctx, b.name, metav1.GetOptions{})
	now := e.o.Clock.Now()
	if apierrors.IsNotFound(err) {
		e.mu.Lock()
		held := b.held
		e.mu.Unlock()
		if held {
			e.o.Log.Info("the bucket's Lease was deleted (by hand?) while this replica held it; writing it again", "bucket", b.i, "lease", e.o.Namespace+"/"+b.name)
		}
		l := newLease(e.o.Namespace, b.name, b.i)
		rec := e.mine(record{}, now, true)
		rec.write(l)
		if _, err := e.leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return err // AlreadyExists: another replica created it first; the next try reads it
		}
		e.saw(b, rec, now)
		if !held {
			e.mu.Lock()
			b.handoff = ""
			e.mu.Unlock()
		}
		return nil
	}
	if err != nil {
		return err
	}
	rec := readRecord(u)
	e.saw(b, rec, now)
	if rec.holder != "" && rec.holder != e.o.Identity {
		e.mu.Lock()
		since := b.seenAt
		e.mu.Unlock()
		if now.Before(since.Add(e.o.LeaseDuration)) {
			e.notice(b, rec)
			return heldElsewhere{rec.holder}
		}
		e.o.Log.Info("the bucket's Lease has not been renewed by its holder for the lease duration; taking it over",
			"bucket", b.i, "lease", e.o.Namespace+"/"+b.name, "holder", rec.holder, "holderVersion", rec.version, "duration", e.o.LeaseDuration)
	}
	acquiring := rec.holder != e.o.Identity
	next := e.mine(rec, now, acquiring)
	next.write(u)
	if _, err := e.leases.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		return err // a conflict: someone wrote it since; the next try reads it again
	}
	e.saw(b, next, now)
	if acquiring {
		e.mu.Lock()
		b.handoff = ""
		if rec.holder == "" {
			b.handoff = rec.handoff // released: its holder said how far it may have sent
		}
		e.mu.Unlock()
	}
	return nil
}

// saw records the Lease as read or written; seenAt moves only when it
// changed (the expiry is judged from here).
func (e *Elector) saw(b *state, r record, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r != b.seen || b.seenAt.IsZero() {
		b.seen, b.seenAt = r, now
	}
}

// mine is rec with this replica as holder, renewed now.
func (e *Elector) mine(rec record, now time.Time, acquiring bool) record {
	r := rec
	r.holder, r.version, r.buckets, r.handoff = e.o.Identity, e.o.Version, strconv.Itoa(e.o.Buckets), ""
	r.duration = int64((e.o.LeaseDuration + time.Second - 1) / time.Second)
	r.renew = formatMicro(now)
	if acquiring {
		r.acquire = r.renew
		if rec.holder != "" || rec.transitions > 0 {
			r.transitions = rec.transitions + 1
		}
	}
	return r
}

// notice logs, once per holder, what is odd about a Lease another holds:
// no version (not written by a hub), another version, another bucket
// count.
func (e *Elector) notice(b *state, rec record) {
	key := rec.holder + "\x00" + rec.version + "\x00" + rec.buckets
	e.mu.Lock()
	if b.warned == key {
		e.mu.Unlock()
		return
	}
	b.warned = key
	e.mu.Unlock()
	log := e.o.Log.WithValues("bucket", b.i, "lease", e.o.Namespace+"/"+b.name, "holder", rec.holder)
	switch {
	case rec.version == "":
		log.Info(fmt.Sprintf("the bucket's Lease names a holder but carries no %s annotation: no hub replica wrote it (edited by hand?); this replica takes the bucket once that holder has not renewed it for the lease duration", VersionAnnotation),
			"duration", e.o.LeaseDuration)
	case rec.version != e.o.Version:
		log.Info("the bucket is held by a replica of another hub version: two versions of the hub run side by side (a rolling upgrade under way, or two installs of the hub)",
			"holderVersion", rec.version, "version", e.o.Version)
	}
	if rec.version != "" && rec.buckets != strconv.Itoa(e.o.Buckets) {
		log.Error(nil, "the bucket's holder divides the Subscriptions into another number of buckets: some Subscriptions are served twice and others not at all until every replica runs with the same --buckets",
			"holderBuckets", rec.buckets, "buckets", e.o.Buckets)
	}
}

// release empties the holder of b's Lease if this replica holds it, so
// that another replica takes it at its next try.
func (e *Elector) release(ctx context.Context, b *state) {
	e.mu.Lock()
	held, handoff := b.held, b.release
	b.held = false
	e.mu.Unlock()
	if !held {
		return
	}
	e.o.OnChange(b.i, false)
	log := e.o.Log.WithValues("bucket", b.i, "lease", e.o.Namespace+"/"+b.name)
	u, err := e.leases.Get(ctx, b.name, metav1.GetOptions{})
	if err != nil {
		log.Error(err, "releasing the bucket's Lease: reading it failed; it expires instead")
		return
	}
	rec := readRecord(u)
	if rec.holder != e.o.Identity {
		return
	}
	rec.holder, rec.duration, rec.handoff = "", 1, handoff
	rec.renew = formatMicro(e.o.Clock.Now())
	rec.write(u)
	if _, err := e.leases.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		log.Error(err, "releasing the bucket's Lease failed; it expires instead")
		return
	}
	log.Info("bucket released")
}
