package manifests

import (
	"testing"
	"time"
)

// TestIdleWindow: real Knative scales to zero only after a stable window
// without requests, so an --idle shorter than its default window (60 s)
// sets the window too, never below Knative's least (6 s); a longer one
// leaves the window alone (the retention period then keeps the instance).
func TestIdleWindow(t *testing.T) {
	for _, c := range []struct {
		idle time.Duration
		want time.Duration
		ok   bool
	}{
		{3 * time.Second, 6 * time.Second, true},
		{6 * time.Second, 6 * time.Second, true},
		{20 * time.Second, 20 * time.Second, true},
		{time.Minute, 0, false},
		{10 * time.Minute, 0, false},
	} {
		got, ok := idleWindow(c.idle)
		if got != c.want || ok != c.ok {
			t.Errorf("idleWindow(%s) = %s, %v; want %s, %v", c.idle, got, ok, c.want, c.ok)
		}
	}
}
