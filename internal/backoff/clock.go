package backoff

import (
	"time"

	"k8s.io/utils/clock"
)

// Clock is the time source of a Tracker: the part of k8s.io/utils/clock's
// WithDelayedExecution it uses, so the clock that keyq, lease and wakeup
// take (clock.RealClock) serves here too.
//
// Tests step this package's FakeClock. k8s.io/utils/clock/testing's
// FakeClock is a Clock as well, but it calls AfterFunc callbacks while
// holding its lock, and a Tracker reads the clock while holding its own: a
// Step concurrent with Failure or After can deadlock there, and a fire that
// reads the clock always does. This FakeClock calls them without its lock,
// in due order.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (RealClock) or from Step
	// (a fake clock) once d has passed.
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// RealClock is the wall clock.
func RealClock() Clock { return clock.RealClock{} }

var (
	_ Clock = clock.RealClock{}
	_ Clock = clock.WithDelayedExecution(nil)
)
