package trim

import (
	"os"
	"runtime/debug"
	"time"
)

// IdlePercent is the garbage collector's percent (GOGC) an always-on
// process runs with while it is idle: with a small live heap, the default
// (100, and a 4 MiB floor) lets garbage grow to several times what is live
// between two collections, and that garbage stays resident. At 25 the
// floor is 1 MiB; an idle process allocates little, so the extra
// collections cost next to nothing.
const IdlePercent = 25

// IdleRelease is how often an idle process gives its heap's free pages
// back (debug.FreeOSMemory: a collection, then every free page returned;
// about a millisecond for a heap of a few MiB): the runtime's own
// scavenger returns them only slowly, and keeps some for the next
// allocations, which an idle process does not make.
const IdleRelease = 30 * time.Second

// IdleGC tightens the collector while an always-on process is idle (the
// hub: Settle decides when): IdlePercent from the trim until the next work,
// and its free pages returned every IdleRelease meanwhile. At the first
// work it gives back the percent it found. With GOGC set in the
// environment it changes nothing: the user's setting holds.
type IdleGC struct {
	off      bool
	busy     int       // the percent to go back to
	idle     bool      // IdlePercent is in force
	released time.Time // the trim, or the last release since
}

// NewIdleGC is an IdleGC of this process.
func NewIdleGC() *IdleGC { return &IdleGC{off: os.Getenv("GOGC") != "" || Mode == "off"} }

// Idle tightens the collector; the process has just been trimmed (now).
func (g *IdleGC) Idle(now time.Time) {
	if g.off {
		return
	}
	g.released = now
	if !g.idle {
		g.busy, g.idle = setGCPercent(IdlePercent), true
	}
}

// Tick returns the free pages if the process has been idle for
// IdleRelease since the trim or the last release.
func (g *IdleGC) Tick(now time.Time) {
	if g.off || !g.idle || now.Sub(g.released) < IdleRelease {
		return
	}
	g.released = now
	freeOSMemory()
}

// Busy gives the collector back its percent.
func (g *IdleGC) Busy() {
	if g.off || !g.idle {
		return
	}
	setGCPercent(g.busy)
	g.idle = false
}

// setGCPercent and freeOSMemory are the runtime's; tests see the calls.
var (
	setGCPercent = debug.SetGCPercent
	freeOSMemory = debug.FreeOSMemory
)
