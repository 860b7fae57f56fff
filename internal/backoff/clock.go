package backoff

import "time"

// Clock is the time source of a Tracker. RealClock is the wall clock; tests
// step a FakeClock instead of sleeping.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (RealClock) or from Step
	// (FakeClock) once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened yet and reports
	// whether it did so, like time.Timer.Stop.
	Stop() bool
}

// RealClock is the wall clock: time.Now and time.AfterFunc.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

var (
	_ Clock = realClock{}
	_ Timer = (*time.Timer)(nil)
)
