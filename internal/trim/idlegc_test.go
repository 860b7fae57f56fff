package trim

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestIdleGC: Idle sets IdlePercent once, Tick returns the free pages
// every IdleRelease while idle and never while busy, Busy gives back the
// percent found; with GOGC set by the user nothing changes.
func TestIdleGC(t *testing.T) {
	percent := 100
	var calls []string
	oldSet, oldFree := setGCPercent, freeOSMemory
	setGCPercent = func(p int) int {
		calls = append(calls, "percent "+strconv.Itoa(p))
		was := percent
		percent = p
		return was
	}
	freeOSMemory = func() { calls = append(calls, "free") }
	defer func() { setGCPercent, freeOSMemory = oldSet, oldFree }()

	t.Setenv("GOGC", "")
	g := NewIdleGC()
	t0 := time.Unix(1000, 0)
	g.Tick(t0.Add(time.Hour)) // busy: nothing returned
	g.Busy()                  // not idle: nothing to give back
	g.Idle(t0)
	g.Tick(t0.Add(IdleRelease - time.Second)) // too early
	g.Tick(t0.Add(IdleRelease))               // due
	g.Idle(t0.Add(IdleRelease + time.Second)) // trimmed again: already idle, the release counts from here
	g.Tick(t0.Add(2 * IdleRelease))           // less than IdleRelease since the trim
	if percent != IdlePercent {
		t.Fatalf("percent %d while idle, want %d", percent, IdlePercent)
	}
	g.Busy()
	g.Tick(t0.Add(10 * IdleRelease)) // busy again: nothing returned
	g.Busy()
	if percent != 100 {
		t.Fatalf("percent %d once busy again, want the 100 found", percent)
	}
	if want := []string{"percent 25", "free", "percent 100"}; !slices.Equal(calls, want) {
		t.Fatalf("runtime calls %q, want %q", calls, want)
	}

	calls = nil
	t.Setenv("GOGC", "200")
	u := NewIdleGC()
	u.Idle(t0)
	u.Tick(t0.Add(time.Hour))
	u.Busy()
	if len(calls) != 0 {
		t.Fatalf("with GOGC=200 set by the user, the runtime was called %q, want never", calls)
	}
}
