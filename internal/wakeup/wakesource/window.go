package wakesource

import (
	"container/heap"
	"slices"
	"strconv"
	"strings"
	"time"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/resourceversion"
)

// DueBucketLabel indexes a Wakeup by its due time, so that the wakeup
// source can list the records due soon without reading the others: the
// start, in Unix seconds, of the BucketSeconds-long interval that spec.due
// falls in (a multiple of BucketSeconds). The Store writes it with every
// due time. A label, not a field selector: neither can select a range, but
// a label selector can select a set of values (`in (...)`) on every API
// server, where a CRD field needs selectableFields and allows only
// equality.
const DueBucketLabel = "opzero.dev/due-bucket"

// BucketSeconds is the width of a due bucket: one second, so that a
// burst of records due at about the same time spreads over several.
const BucketSeconds = 1

// DueBucket is the DueBucketLabel value for due.
func DueBucket(due time.Time) string { return strconv.FormatInt(bucketOf(due), 10) }

// bucketOf is the start of due's bucket, in Unix seconds.
func bucketOf(t time.Time) int64 {
	s := t.Unix()
	m := s % BucketSeconds
	if m < 0 {
		m += BucketSeconds
	}
	return s - m
}

// bucketLabel is w's due bucket if its label is present and agrees with
// spec.due; a record without one (written by an older Store, or by hand)
// is a stray.
func bucketLabel(w *v1alpha1.Wakeup) (int64, bool) {
	v, ok := w.Labels[DueBucketLabel]
	if !ok {
		return 0, false
	}
	b, err := strconv.ParseInt(v, 10, 64)
	if err != nil || b != bucketOf(w.Spec.Due.Time) {
		return 0, false
	}
	return b, true
}

// The window: the Source holds an entry for
//
//   - every labeled record due before s.cutoff, at most about
//     SourceOptions.Window of them, and
//   - every stray (no valid DueBucketLabel), whatever its due time.
//
// s.cutoff <= s.horizon, which stays at least one bucket ahead of the
// clock. The keeper (keep.go) moves both, reading only the buckets between
// them.

// admit applies the state of record w (from a list or a watch event) to
// the window and returns its entry, nil if it is beyond the cutoff.
// Callers hold s.mu.
func (s *Source) admit(w *v1alpha1.Wakeup) *entry {
	k := w.Namespace + "/" + w.Name
	b, labeled := bucketLabel(w)
	if labeled && !w.Spec.Due.Time.Before(s.cutoff) {
		s.forget(k) // beyond the window: read again when the cutoff passes it
		return nil
	}
	e, ok := s.entries[k]
	if !ok {
		e = &entry{ns: w.Namespace, name: w.Name, index: -1}
		s.entries[k] = e
	} else if e.rv == w.ResourceVersion {
		return e // unchanged, perhaps being delivered
	}
	if e.labeled != labeled {
		if labeled {
			s.labeled++
		} else if ok {
			s.labeled--
		}
	}
	e.labeled, e.bucket = labeled, b
	e.rv, e.due, e.sink = w.ResourceVersion, w.Spec.Due.Time, w.Spec.Sink
	e.target, e.operator, e.reason, e.failures = w.Spec.Target, w.Spec.Operator, w.Spec.Reason, 0
	if e.index >= 0 {
		heap.Fix(&s.due, e.index)
	} else {
		heap.Push(&s.due, e)
	}
	s.poke()
	if s.labeled > s.opts.Window+s.opts.Window/8 {
		s.trim()
	}
	return e
}

// forget drops key k from the window. Callers hold s.mu.
func (s *Source) forget(k string) {
	e, ok := s.entries[k]
	if !ok {
		return
	}
	if e.index >= 0 {
		heap.Remove(&s.due, e.index)
	}
	if e.labeled {
		s.labeled--
	}
	delete(s.entries, k)
}

// trim keeps the Window earliest labeled entries and lowers the cutoff to
// the first one dropped (with every entry due at that same instant).
// Entries being delivered stay. Callers hold s.mu.
func (s *Source) trim() {
	var held []*entry
	for _, e := range s.entries {
		if e.labeled && e.index >= 0 {
			held = append(held, e)
		}
	}
	if len(held) <= s.opts.Window {
		return
	}
	slices.SortFunc(held, func(a, b *entry) int { return a.due.Compare(b.due) })
	cut := held[s.opts.Window].due
	if cut.Before(s.cutoff) {
		s.cutoff = cut
	}
	s.group = 1 // dense here: the next read takes one bucket (advance doubles it while they are sparse)
	for _, e := range held[s.opts.Window:] {
		s.forget(e.ns + "/" + e.name)
	}
	for i := s.opts.Window - 1; i >= 0 && !held[i].due.Before(cut); i-- {
		s.forget(held[i].ns + "/" + held[i].name)
	}
}

// stale reports whether a watch event of w is older than a list the
// window already took w's bucket from: the list showed the state after it.
// Callers hold s.mu.
func (s *Source) stale(w *v1alpha1.Wakeup) bool {
	b, ok := bucketLabel(w)
	if !ok {
		return false
	}
	rv, ok := s.listed[b]
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(w.ResourceVersion, rv)
	return err == nil && c <= 0
}

// watched notes that the watch has reached resource version rv: lists
// older than it can no longer make an event stale. Callers hold s.mu.
func (s *Source) watchedTo(rv string) {
	s.seen = rv
	for b, lrv := range s.listed {
		if c, err := resourceversion.CompareResourceVersion(rv, lrv); err != nil || c > 0 {
			delete(s.listed, b)
		}
	}
}

// bucketSelector selects the records of buckets [from, to) (at most
// maxBuckets of them) and returns the end of what it selects.
func bucketSelector(from, to int64) (string, []int64, int64) {
	var bs []int64
	var vals []string
	b := from
	for ; b < to && len(bs) < maxBuckets; b += BucketSeconds {
		bs = append(bs, b)
		vals = append(vals, strconv.FormatInt(b, 10))
	}
	return DueBucketLabel + " in (" + strings.Join(vals, ",") + ")", bs, b
}

// maxBuckets bounds the buckets one list selects (a selector's length:
// ~700 bytes).
const maxBuckets = 64

// dueHeap orders entries by due time.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *dueHeap) Push(x any)        { e := x.(*entry); e.index = len(*h); *h = append(*h, e) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
