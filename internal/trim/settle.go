package trim

import "time"

// Settle decides when an always-on process (the opzero hub) trims: once
// its start has settled, and again each time it has been quiet for a
// while after it worked. A process that keeps working is not trimmed
// until it is quiet: what its work touches would be mapped again at once.
//
// The caller reads a counter of its work (anything that changes when it
// worked) every few seconds and trims (Now) when Due says so.
type Settle struct {
	// After is how long after the first Due the first trim comes (the
	// start's work, its first lists and deliveries, done by then).
	After time.Duration
	// Quiet is how long without work, after work, before trimming again.
	Quiet time.Duration

	start   time.Time // the first Due
	changed time.Time // when work last changed
	work    float64   // as of the last Due
	trimmed bool      // the first trim is done
	dirty   bool      // work since the last trim
}

// Due reports whether to trim now, work being the process's counter at
// now; it assumes the trim is done when it says so.
func (s *Settle) Due(now time.Time, work float64) bool {
	if s.start.IsZero() {
		s.start, s.changed, s.work = now, now, work
	}
	if work != s.work {
		s.work, s.changed, s.dirty = work, now, true
	}
	switch {
	case !s.trimmed:
		if now.Sub(s.start) < s.After {
			return false
		}
	case !s.dirty || now.Sub(s.changed) < s.Quiet:
		return false
	}
	s.trimmed, s.dirty = true, false
	return true
}
