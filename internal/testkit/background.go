package testkit

import (
	"context"
	"testing"
)

// Background runs f in a goroutine with a context that is cancelled when t
// ends; t's cleanup then waits for f to return and fails t if f returned an
// error. Use it for servers and managers that run until cancelled.
func Background(t testing.TB, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("after cancel, the background run returned %v, want nil", err)
		}
	})
}
