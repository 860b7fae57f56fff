package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often Eventually and Wait check their condition.
const Interval = 20 * time.Millisecond

// Eventually calls cond every Interval until it returns true, and fails t
// if it has not by timeout. An error from cond does not stop the polling
// (the condition may still come true: a transient API error, a server not
// yet listening); the last one is reported if time runs out. cond's context
// ends at the deadline.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := Poll(context.Background(), timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls cond every Interval until it returns true (nil), ctx ends or
// timeout passes (an error that says how long it waited and what cond last
// returned).
func Poll(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		if last != nil {
			return fmt.Errorf("not within %s; last error: %w", timeout, last)
		}
		return fmt.Errorf("not within %s", timeout)
	}
}

// Wait calls cond every Interval until it returns true or timeout passes,
// and reports whether it did: for helpers that decide themselves what a
// timeout means.
func Wait(timeout time.Duration, cond func() bool) bool {
	return Poll(context.Background(), timeout, func(context.Context) (bool, error) { return cond(), nil }) == nil
}
