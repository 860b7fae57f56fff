// keep.go: the window of due Wakeups kept current (keep: a watch from
// every record's state, labeled lists raising the cutoff), not the Lease
// keeping of internal/engine/serverless/keep.go.

package wakesource

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/backoff"
)

// keep fills the window and keeps it current until ctx ends:
//
//  1. a watch of every record that begins with every record's state (its
//     initial events, sendInitialEvents) and then follows their changes:
//     one pass over the API server's watch cache, streamed (memory: one
//     event, the window and the strays), which also finds records that
//     fell due while no source ran. Until its initial events end nothing
//     is delivered, so that the earliest due goes first. An API server
//     without WatchList gets a paged list of every record instead
//     (scanAll), then a watch from that list's resource version;
//  2. an event of a record due before the cutoff, or of a stray, updates
//     its entry, any other event drops it;
//  3. when the clock is within a minute of the cutoff and fewer than half a
//     window of labeled entries are held, a paged list of the next buckets
//     (up to the horizon, a group at a time), by label, raises the cutoff.
//     Watch events older than such a list are skipped for the buckets it
//     read (resource versions compared). While a list is read, only
//     entries due before what it may bring are delivered.
//
// A failed list or watch is retried with backoff; a watch that fails
// before its initial events end, or can no longer resume (410 Gone),
// starts again from 1.
func (s *Source) keep(ctx context.Context) {
	retry := backoff.Policy{Base: 200 * time.Millisecond, Cap: 30 * time.Second}
	failures := 0
	fail := func(err error) bool {
		s.health.set(false, err)
		s.opts.Log.Error(err, "reading Wakeups failed; retrying")
		t := s.opts.Clock.NewTimer(retry.Delay(failures))
		defer t.Stop()
		failures++
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		}
	}
	rv := "" // where the watch resumes; "": start again (1)
	for ctx.Err() == nil {
		if rv == "" && s.paged {
			var err error
			if rv, err = s.scanAll(ctx); err != nil {
				if !fail(fmt.Errorf("listing Wakeups: %w", err)) {
					return
				}
				continue
			}
			s.health.synced()
		}
		next, gone, err := s.follow(ctx, rv)
		if err == nil {
			failures = 0
			rv = next
			continue // the watch ended normally: resume
		}
		if ctx.Err() != nil || !fail(err) {
			return
		}
		rv = next
		if gone {
			rv = "" // list again
		}
	}
}

// follow watches from rv (from every record's initial state if rv is
// empty), applying events and moving the window, until the watch ends or
// fails. It returns the last resource version it applied ("" while the
// initial events had not ended) and whether the watch can no longer resume
// from it.
func (s *Source) follow(ctx context.Context, rv string) (string, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, LabelSelector: s.operatorSelector()}
	var gen uint64 // while the initial events are read: the scan they make
	if rv == "" {
		opts.SendInitialEvents, opts.ResourceVersionMatch = ptr.To(true), metav1.ResourceVersionMatchNotOlderThan
		gen = s.beginScan(true, time.Time{})
		defer func() {
			if gen != 0 {
				s.endScan()
			}
		}()
	}
	w, err := s.c.Watch(ctx, s.opts.Namespace, *opts)
	if err != nil {
		if gen != 0 && (apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)) {
			// No WatchList (sendInitialEvents is refused): list page by page.
			s.paged = true
			s.opts.Log.Info("the API server refuses a watch's initial events; listing Wakeups page by page at start", "error", err.Error())
			return "", false, nil
		}
		return rv, gen != 0 || apierrors.IsResourceExpired(err) || apierrors.IsGone(err), fmt.Errorf("watching Wakeups: %w", err)
	}
	defer w.Stop()
	s.health.set(true, nil)
	tick := s.opts.Clock.NewTimer(time.Hour)
	defer tick.Stop()
	for {
		if gen == 0 {
			if err := s.advance(ctx); err != nil {
				return rv, false, err
			}
			tick.Stop()
			tick.Reset(s.nextAdvance())
		}
		select {
		case <-ctx.Done():
			return rv, false, nil
		case <-tick.C():
		case ev, ok := <-w.ResultChan():
			if !ok {
				s.health.set(false, fmt.Errorf("the watch of Wakeups ended"))
				return rv, false, nil
			}
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				return rv, gen != 0 || apierrors.IsResourceExpired(err) || apierrors.IsGone(err), fmt.Errorf("watching Wakeups: %w", err)
			}
			wk, ok := ev.Object.(*v1alpha1.Wakeup)
			if !ok {
				continue
			}
			if gen != 0 {
				if ev.Type == watch.Bookmark && wk.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
					rv = wk.ResourceVersion
					s.mu.Lock()
					s.seen = rv
					s.mu.Unlock()
					s.dropUnseen(gen, func(*entry) bool { return true })
					s.endScan()
					gen = 0
					s.health.synced()
					continue
				}
				if ev.Type == watch.Added {
					s.mu.Lock()
					if e := s.admit(wk); e != nil {
						e.scan = gen
					}
					s.mu.Unlock()
					continue
				}
			}
			rv = wk.ResourceVersion
			s.mu.Lock()
			switch {
			case ev.Type == watch.Bookmark:
			case s.stale(wk):
			case ev.Type == watch.Deleted:
				s.forget(wk.Namespace + "/" + wk.Name)
			default:
				s.admit(wk)
			}
			s.watchedTo(rv)
			s.mu.Unlock()
		}
	}
}

// lookahead is how far ahead of the clock the window reaches when it is
// not full; lead is how long before the cutoff it reads further.
const (
	lookahead = 2 * time.Minute
	lead      = time.Minute
)

// nextAdvance is how long until the window should read further: a
// minute before the clock reaches the cutoff; never while half a window
// or more is held (the deliveries' delete events call advance then).
func (s *Source) nextAdvance() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.labeled >= s.opts.Window/2 {
		return time.Hour
	}
	return max(s.cutoff.Sub(s.opts.Clock.Now())-lead, 0)
}

// advance moves the horizon to lookahead past the clock and, while the
// cutoff is below it and less than lead ahead of the clock, and less than
// half a window is held, reads the next buckets: a group of them at a time, halved when a group fills a quarter
// of the window, doubled when it brings little.
func (s *Source) advance(ctx context.Context) error {
	for {
		s.mu.Lock()
		if h := time.Unix(bucketOf(s.opts.Clock.Now().Add(lookahead))+BucketSeconds, 0); h.After(s.horizon) {
			s.horizon = h
		}
		// Held records are all due before the cutoff, the others after it:
		// read further only when the clock nears the cutoff with less than
		// half a window held (idle: one list a minute).
		if !s.cutoff.Before(s.horizon) || s.labeled >= s.opts.Window/2 || s.cutoff.Sub(s.opts.Clock.Now()) >= lead {
			s.mu.Unlock()
			return nil
		}
		from := bucketOf(s.cutoff)
		to := min(from+int64(s.group)*BucketSeconds, s.horizon.Unix())
		before := s.labeled
		s.mu.Unlock()
		sel, buckets, end := bucketSelector(from, to)
		if err := s.scanBuckets(ctx, sel, buckets, time.Unix(end, 0)); err != nil {
			return fmt.Errorf("listing Wakeups due soon: %w", err)
		}
		s.mu.Lock()
		switch got := s.labeled - before; {
		case got >= s.opts.Window/4:
			s.group = max(1, s.group/2)
		case got < s.opts.Window/16:
			s.group = min(2*s.group, maxBuckets)
		}
		s.mu.Unlock()
	}
}

// scanAll lists every record into a window reset to the horizon, page by
// page, and returns the list's resource version. Each continued page costs
// the API server a pass over the records after it (served from etcd, or
// from a snapshot of its watch cache: both visit the rest of the range), so
// listing n records in pages of p costs about n*n/2p: the watch's initial
// events (follow) replace it where the server has WatchList.
func (s *Source) scanAll(ctx context.Context) (string, error) {
	return s.scan(ctx, "", true, func(*entry) bool { return true }, time.Time{})
}

// scanBuckets lists the records of buckets (selected by sel) into the
// window with its cutoff raised to upTo, and marks the buckets listed.
func (s *Source) scanBuckets(ctx context.Context, sel string, buckets []int64, upTo time.Time) error {
	in := map[int64]bool{}
	for _, b := range buckets {
		in[b] = true
	}
	s.mu.Lock()
	below := s.cutoff // what is held is due before it, what the list brings after
	if upTo.After(s.horizon) {
		upTo = s.horizon
	}
	if upTo.After(s.cutoff) {
		s.cutoff = upTo
	}
	s.mu.Unlock()
	rv, err := s.scan(ctx, sel, false, func(e *entry) bool { return e.labeled && in[e.bucket] }, below)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, b := range buckets {
		s.listed[b] = rv
	}
	s.mu.Unlock()
	return nil
}

// scan lists the records matching sel page by page, admitting each, then
// drops the entries in scope that the list did not show (deleted or moved
// meanwhile); all resets the window first. It returns the list's resource
// version. Until it returns, only entries due before below are delivered:
// the list's pages come in name order, not due order.
func (s *Source) scan(ctx context.Context, sel string, all bool, scope func(*entry) bool, below time.Time) (string, error) {
	if op := s.operatorSelector(); op != "" {
		sel = strings.TrimPrefix(op+","+sel, ",")
		sel = strings.TrimSuffix(sel, ",")
	}
	gen := s.beginScan(all, below)
	defer s.endScan()
	var rv string
	for cont := ""; ; {
		list, err := s.c.List(ctx, s.opts.Namespace, metav1.ListOptions{Limit: s.opts.PageSize, Continue: cont, LabelSelector: sel})
		if err != nil {
			return "", err
		}
		if rv == "" {
			rv = list.ResourceVersion
		}
		s.mu.Lock()
		for i := range list.Items {
			w := &list.Items[i]
			if e := s.admit(w); e != nil {
				e.scan = gen
			}
		}
		s.mu.Unlock()
		if cont = list.Continue; cont == "" {
			break
		}
		list.Items = nil
	}
	s.dropUnseen(gen, scope)
	return rv, nil
}

// beginScan starts reading a list (or a watch's initial events): all
// resets the window to the horizon first; until endScan only entries due
// before below are delivered. It returns the scan's number, for admit's
// entries and dropUnseen.
func (s *Source) beginScan(all bool, below time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if all {
		s.horizon = time.Unix(bucketOf(s.opts.Clock.Now().Add(lookahead))+BucketSeconds, 0)
		s.cutoff = s.horizon
		s.listed = map[int64]string{}
	}
	s.scans++
	s.gated, s.below = true, below
	return s.scans
}

// endScan lets every due entry be delivered again.
func (s *Source) endScan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gated = false
	s.poke()
}

// dropUnseen drops the entries in scope that scan gen did not show.
func (s *Source) dropUnseen(gen uint64, scope func(*entry) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.entries {
		if e.scan != gen && scope(e) {
			s.forget(k)
		}
	}
}

// operatorSelector selects the operator's records (SourceOptions.Operator).
func (s *Source) operatorSelector() string {
	if len(s.opts.Operators) > 0 {
		return OperatorLabel + " in (" + strings.Join(s.opts.Operators, ",") + ")"
	}
	if s.opts.Operator == "" {
		return ""
	}
	return OperatorLabel + "=" + s.opts.Operator
}
