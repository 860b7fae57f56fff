// sole.go: the operator's sole Lease, with which one instance that runs
// alone holds every key at once instead of taking a Lease per key.

package serverless

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/internal/lease"
)

// One instance alone (with a Locker): the first run of a warm period takes
// the operator's sole Lease (lease.AcquireSole: one write, one list) and,
// while this instance holds it, every key's run reconciles without a
// per-key Lease: a burst of N keys costs the sole Lease's create, its
// renewals and its delete instead of 2N writes. The sole Lease is kept
// while runs keep coming, released once none has used it for soleIdle,
// and given up (stepping down) when another instance asks for it (it
// marked it wanted: it got an event and may not reconcile). Stepping down
// waits for the runs that started alone to end (new runs wait meanwhile),
// then deletes the sole Lease; for soleCool after that, and after finding
// another instance's live per-key Lease, this instance uses per-key
// Leases as before, without trying for the sole Lease. A cold-started
// instance may take it before its first event (warm, Engine.Warm), only
// if nobody holds it.
//
// The event cache (Options.EventCache) serves only while this instance
// holds the sole Lease: another instance's events never reach this one.
const (
	soleIdle = 5 * time.Second
	soleCool = 2 * time.Minute
	// soleAsk: a sole Lease found held by another instance is not read
	// again for this long (or until its expiry, if sooner).
	soleAsk = time.Second
	// soleTick paces the sole Lease's upkeep: renewal (every third of its
	// duration), the idle release.
	soleTick = 500 * time.Millisecond
	// soleRetake paces the looks at the sole Lease meanwhile.
	soleRetake = 200 * time.Millisecond
)

// errNotAlone: this instance does not hold the sole Lease and is not
// trying for it now; runs take per-key Leases.
var errNotAlone = errors.New("not alone: per-key Leases")

type sole struct {
	l     *lease.Locker
	log   logr.Logger
	serve func(alone bool) // the event cache's switch

	mu       sync.Mutex
	held     *lease.SoleHeld
	stopLoop func()
	runs     map[*soleRun]bool // the runs reconciling alone
	lastEnd  time.Time
	// stepping, while the holder steps down: no run starts alone, and
	// those that wait for it to end (closed) take per-key Leases.
	stepping chan struct{}
	// busy, while the sole Lease is being taken or given up: runs wait.
	busy    chan struct{}
	cool    time.Time            // no attempt before
	he      *lease.HeldElsewhere // the sole Lease as found held elsewhere
	heUntil time.Time
	closed  bool

	// Stats: sole Leases taken, given up to another instance, lost.
	Acquired, SteppedDown, Lost int
}

// soleRun is one run that reconciles alone.
type soleRun struct {
	s      *sole
	cancel context.CancelCauseFunc
}

func newSole(l *lease.Locker, log logr.Logger, serve func(bool)) *sole {
	return &sole{l: l, log: log, serve: serve, runs: map[*soleRun]bool{}}
}

// enter returns a run that reconciles alone, with its context (ended if
// the sole Lease is lost), taking the sole Lease if nobody holds it.
// Otherwise the error says why not: *lease.HeldElsewhere (Sole set: the
// holder has been asked to step down; the run must not reconcile),
// errNotAlone (per-key Leases), or the API server's.
func (s *sole) enter(ctx context.Context) (*soleRun, context.Context, error) {
	for {
		s.mu.Lock()
		if s.held != nil && s.stepping == nil {
			rctx, cancel := context.WithCancelCause(ctx)
			r := &soleRun{s: s, cancel: cancel}
			s.runs[r] = true
			s.mu.Unlock()
			return r, rctx, nil
		}
		if ch := firstChan(s.stepping, s.busy); ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, nil, context.Cause(ctx)
			}
		}
		now := s.l.Clock().Now()
		switch {
		case s.closed || now.Before(s.cool):
			s.mu.Unlock()
			return nil, nil, errNotAlone
		case s.he != nil && now.Before(s.heUntil):
			he := *s.he
			s.mu.Unlock()
			return nil, nil, &he
		}
		busy := make(chan struct{})
		s.busy = busy
		s.mu.Unlock()
		if err := s.take(ctx, busy, true); err != nil {
			return nil, nil, err
		}
	}
}

// take tries for the sole Lease while busy (set by the caller, s.mu not
// held) and closes it. ask: mark it wanted if another instance holds it
// (the holder steps down; runs are told *HeldElsewhere until soleAsk);
// without, a sole Lease held elsewhere leaves no trace. The outcome is in
// s.held, s.he and s.cool; the error is errNotAlone once closed, or the
// API server's.
func (s *sole) take(ctx context.Context, busy chan struct{}, ask bool) error {
	var held *lease.SoleHeld
	var err error
	if ask {
		held, err = s.l.AcquireSole(ctx)
	} else {
		held, err = s.l.TakeSoleIfFree(ctx)
	}
	s.mu.Lock()
	s.busy = nil
	close(busy)
	now := s.l.Clock().Now()
	var he *lease.HeldElsewhere
	switch {
	case err == nil && s.closed:
		s.mu.Unlock()
		s.give(held)
		return errNotAlone
	case err == nil:
		s.held, s.he, s.lastEnd = held, nil, now
		s.Acquired++
		s.serve(true)
		s.stopLoop = s.keep(held)
		s.log.V(1).Info("running alone: the operator's sole lease taken, no per-key leases", "beforeAnEvent", !ask)
	case errors.As(err, &he):
		if ask {
			s.he, s.heUntil = he, minTime(he.Expires, now.Add(soleAsk))
		}
	case errors.Is(err, lease.ErrShared):
		s.cool = now.Add(soleCool)
	default:
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	return nil
}

// awaitHandOver waits for the holder of the sole Lease, asked to step
// down, to let it go, and enters a run once this instance has taken it.
// The holder reads the ask when it renews (every third of the Lease's
// duration) and lets go a soleTick after its runs end, so a draining or
// idle holder has let go within a third of the duration and two ticks:
// the wait's bound (and ctx's deadline, less a second). Nil if it was not
// let go in time (the holder is still reconciling, hung, or died holding
// it until it expires), or this instance goes to per-key Leases meanwhile:
// the run is then answered 503, the sender delivers again.
func (s *sole) awaitHandOver(ctx context.Context) (*soleRun, context.Context) {
	deadline := s.l.Clock().Now().Add(s.l.Duration()/3 + 3*soleTick)
	if d, ok := ctx.Deadline(); ok && d.Add(-time.Second).Before(deadline) {
		deadline = d.Add(-time.Second) // answer the sender before it gives up
	}
	for {
		if !s.l.Clock().Now().Add(soleRetake).Before(deadline) {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-s.l.Clock().After(soleRetake):
		}
		s.mu.Lock()
		s.he = nil // look at the Lease again (asking again, which costs nothing more)
		s.mu.Unlock()
		r, rctx, err := s.enter(ctx)
		if r != nil {
			return r, rctx
		}
		if !errors.As(err, new(*lease.HeldElsewhere)) {
			return nil, nil
		}
	}
}

// warm takes the sole Lease before any event if nobody holds it, without
// asking a holder to step down (lease.TakeSoleIfFree), unless this
// instance holds it, is taking it, or would not try now (cooling down,
// stepping down, closed, or it found it held elsewhere lately). Taken,
// it is kept as after a run (released once idle for soleIdle): the first
// event's runs then reconcile alone at once. It reports whether this
// instance runs alone.
func (s *sole) warm(ctx context.Context) (bool, error) {
	s.mu.Lock()
	now := s.l.Clock().Now()
	if s.held != nil || s.busy != nil || s.stepping != nil || s.closed || now.Before(s.cool) || (s.he != nil && now.Before(s.heUntil)) {
		alone := s.held != nil
		s.mu.Unlock()
		return alone, nil
	}
	busy := make(chan struct{})
	s.busy = busy
	s.mu.Unlock()
	if err := s.take(ctx, busy, false); err != nil && !errors.Is(err, errNotAlone) {
		return false, err
	}
	return s.alone(), nil
}

func firstChan(chs ...chan struct{}) chan struct{} {
	for _, c := range chs {
		if c != nil {
			return c
		}
	}
	return nil
}

// exit ends a run that reconciled alone.
func (r *soleRun) exit() {
	s := r.s
	s.mu.Lock()
	delete(s.runs, r)
	s.lastEnd = s.l.Clock().Now()
	s.mu.Unlock()
	r.cancel(nil)
}

// keep renews held every third of its duration (also while stepping
// down: the runs that started alone may take long), releases it when
// idle, and gives it up once wanted and its runs have ended, or when it
// is lost; until the returned stop.
func (s *sole) keep(held *lease.SoleHeld) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t := s.l.Clock().NewTicker(soleTick)
	go func() {
		defer close(done)
		defer t.Stop()
		renewed := s.l.Clock().Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			now := s.l.Clock().Now()
			s.mu.Lock()
			switch {
			case s.held != held:
				s.mu.Unlock()
				return
			case len(s.runs) == 0 && (s.stepping != nil || now.Sub(s.lastEnd) >= soleIdle):
				s.let(held, now) // unlocks
				return
			}
			s.mu.Unlock()
			if now.Sub(renewed) < s.l.Duration()/3 {
				continue
			}
			wanted, err := held.Renew(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, lease.ErrLost):
				s.lose(held, err)
				return
			case err != nil:
				// Stop reconciling before the Lease can expire: another
				// instance may take it then.
				if !now.Before(held.Expires().Add(-s.l.Duration() / 3)) {
					s.lose(held, fmt.Errorf("the operator's sole lease could not be renewed: %w", err))
					return
				}
				s.log.Error(err, "renewing the operator's sole lease; trying again")
			default:
				renewed = now
				if wanted {
					s.mu.Lock()
					if s.stepping == nil && s.held == held {
						s.log.Info("another instance of the operator needs to reconcile: stepping down from running alone to per-key leases once the runs under way end", "runs", len(s.runs))
						s.stepping = make(chan struct{})
					}
					s.mu.Unlock()
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// let gives held up: no run reconciles alone (s.mu held; it unlocks it).
func (s *sole) let(held *lease.SoleHeld, now time.Time) {
	stepping := s.stepping
	s.held, s.stepping = nil, nil
	s.serve(false)
	if stepping != nil {
		s.cool = now.Add(soleCool)
		s.SteppedDown++
	}
	busy := make(chan struct{}) // runs wait until it is deleted: taking it again meanwhile would race the delete
	s.busy = busy
	s.mu.Unlock()
	s.give(held)
	s.mu.Lock()
	s.busy = nil
	close(busy)
	if stepping != nil {
		close(stepping)
	}
	s.mu.Unlock()
}

// lose: held was taken by another instance, or could not be renewed in
// time: the runs reconciling alone are cancelled, and no more start.
func (s *sole) lose(held *lease.SoleHeld, cause error) {
	s.log.Error(cause, "the operator's sole lease is lost; reconciles under it are cancelled")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != held {
		return
	}
	s.held = nil
	s.serve(false)
	s.Lost++
	if s.stepping != nil {
		close(s.stepping)
		s.stepping = nil
	}
	for r := range s.runs {
		r.cancel(lease.ErrLost)
	}
}

// give deletes held (bounded: a Lease left behind only expires).
func (s *sole) give(held *lease.SoleHeld) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := held.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
		s.log.Error(err, "releasing the operator's sole lease; it expires by itself")
	}
}

// close releases the sole Lease, if held (shutdown, once the runs are
// done), and takes it no more.
func (s *sole) close() {
	s.mu.Lock()
	s.closed = true
	held, stop := s.held, s.stopLoop
	s.mu.Unlock()
	if held == nil {
		return
	}
	stop()
	s.mu.Lock()
	if s.held != held {
		s.mu.Unlock()
		return
	}
	s.let(held, s.l.Clock().Now())
}

// alone reports whether this instance holds the sole Lease.
func (s *sole) alone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held != nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// forwardable says whether the run's requests go to the holder of the
// sole Lease: it has an address, it is not this instance, and it is up.
func (e *Engine) forwardable(arrivals []*arrival, he *lease.HeldElsewhere) bool {
	return e.fwd != nil && forwardAll(arrivals) && he.Address != "" && he.Address != e.opts.Locker.Address() && e.fwd.up(he.Address, e.opts.Clock.Now())
}

// soleVerdict is the verdict of a run that may not reconcile because
// another instance holds the sole Lease: forwarded there when the run's
// requests can be, else a look again at its expiry (a Lease check, which
// is this instance's own duty), else Unavailable (the sender delivers
// again; the holder has been asked to step down).
func (e *Engine) soleVerdict(ctx context.Context, key reconcile.Request, arrivals []*arrival, he *lease.HeldElsewhere) *Verdict {
	he.Key = key
	if e.forwardable(arrivals, he) {
		he.Forward = true
		return forwardVerdict(key, he)
	}
	if onlyChecks(arrivals) {
		e.stats.HandOffs.Add(1)
		return e.lookAgain(ctx, key, he)
	}
	return unavailableVerdict(key, he)
}
