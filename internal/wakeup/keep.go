package wakeup

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/backoff"
)

// keep fills the window and keeps it current until ctx ends:
//
//  1. a paged list of every record (memory: one page, the window and the
//     strays), which also finds records that fell due while no source ran;
//  2. a watch of every record from that list's resource version: an event
//     of a record due before the cutoff, or of a stray, updates its entry,
//     any other event drops it;
//  3. when the clock is within a minute of the cutoff and fewer than half a
//     window of labeled entries are held, a paged list of the next buckets
//     (up to the horizon, a group at a time), by label, raises the cutoff.
//     Watch events older than such a list are skipped for the buckets it
//     read (resource versions compared). While a list is read, only
//     entries due before what it may bring are delivered.
//
// A failed list or watch is retried with backoff; a watch that can no
// longer resume (410 Gone) starts again from 1.
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
	for ctx.Err() == nil {
		rv, err := s.scanAll(ctx)
		if err != nil {
			if !fail(fmt.Errorf("listing Wakeups: %w", err)) {
				return
			}
			continue
		}
		s.health.synced()
		for ctx.Err() == nil {
			var gone bool
			rv, gone, err = s.follow(ctx, rv)
			if err == nil {
				failures = 0
				continue // the watch ended normally: resume
			}
			if ctx.Err() != nil {
				return
			}
			if !fail(err) {
				return
			}
			if gone {
				break // list again
			}
		}
	}
}

// follow watches from rv, applying events and moving the window, until the
// watch ends or fails. It returns the last resource version it applied and
// whether the watch can no longer resume from it.
func (s *Source) follow(ctx context.Context, rv string) (string, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.c.Watch(ctx, &v1alpha1.WakeupList{}, &client.ListOptions{Namespace: s.opts.Namespace,
		Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, LabelSelector: s.operatorSelector()}})
	if err != nil {
		return rv, apierrors.IsResourceExpired(err) || apierrors.IsGone(err), fmt.Errorf("watching Wakeups: %w", err)
	}
	defer w.Stop()
	s.health.set(true, nil)
	tick := s.opts.Clock.NewTimer(time.Hour)
	defer tick.Stop()
	for {
		if err := s.advance(ctx); err != nil {
			return rv, false, err
		}
		tick.Stop()
		tick.Reset(s.nextAdvance())
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
				return rv, apierrors.IsResourceExpired(err) || apierrors.IsGone(err), fmt.Errorf("watching Wakeups: %w", err)
			}
			wk, ok := ev.Object.(*v1alpha1.Wakeup)
			if !ok {
				continue
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

// scanAll lists every record into a window reset to the horizon and
// returns the list's resource version.
func (s *Source) scanAll(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.horizon = time.Unix(bucketOf(s.opts.Clock.Now().Add(lookahead))+BucketSeconds, 0)
	s.cutoff = s.horizon
	s.listed = map[int64]string{}
	s.mu.Unlock()
	return s.scan(ctx, "", func(*entry) bool { return true }, time.Time{})
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
	rv, err := s.scan(ctx, sel, func(e *entry) bool { return e.labeled && in[e.bucket] }, below)
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
// meanwhile). It returns the list's resource version. Until it returns,
// only entries due before below are delivered: the list's pages come in
// name order, not due order.
func (s *Source) scan(ctx context.Context, sel string, scope func(*entry) bool, below time.Time) (string, error) {
	if op := s.operatorSelector(); op != "" {
		sel = strings.TrimPrefix(op+","+sel, ",")
		sel = strings.TrimSuffix(sel, ",")
	}
	s.mu.Lock()
	s.scans++
	gen := s.scans
	s.gated, s.below = true, below
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.gated = false
		s.poke()
		s.mu.Unlock()
	}()
	list := &v1alpha1.WakeupList{}
	var rv string
	for cont := ""; ; {
		if err := s.c.List(ctx, list, &client.ListOptions{Namespace: s.opts.Namespace, Limit: s.opts.PageSize, Continue: cont,
			Raw: &metav1.ListOptions{LabelSelector: sel}}); err != nil {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.entries {
		if e.scan != gen && scope(e) {
			s.forget(k)
		}
	}
	return rv, nil
}

// operatorSelector selects the operator's records (SourceOptions.Operator).
func (s *Source) operatorSelector() string {
	if s.opts.Operator == "" {
		return ""
	}
	return OperatorLabel + "=" + s.opts.Operator
}
