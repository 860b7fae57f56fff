package manifests

import (
	"maps"
	"testing"
	"time"
)

// TestIdleAnnotations: real Knative keeps an idle instance for its stable
// window, then the retention period, so --idle is split between them: the
// window alone below Knative's default of 60 s (never below its least,
// 6 s), the default window and the rest as retention above it.
func TestIdleAnnotations(t *testing.T) {
	for _, c := range []struct {
		idle time.Duration
		want map[string]any
	}{
		{3 * time.Second, map[string]any{annWindow: "6s"}},
		{6 * time.Second, map[string]any{annWindow: "6s"}},
		{20 * time.Second, map[string]any{annWindow: "20s"}},
		{time.Minute, nil},
		{10 * time.Minute, map[string]any{annRetention: "9m0s"}},
	} {
		if got := idleAnnotations(c.idle); !maps.Equal(got, c.want) {
			t.Errorf("idleAnnotations(%s) = %v; want %v", c.idle, got, c.want)
		}
	}
}
