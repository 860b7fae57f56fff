package dev

import (
	"testing"
	"time"
)

// TestIdleFrom: the idle period is real Knative's: the window (60 s by
// default), then the retention period.
func TestIdleFrom(t *testing.T) {
	for _, c := range []struct {
		ann  map[string]string
		want time.Duration
	}{
		{nil, time.Minute},
		{map[string]string{annWindow: "6s"}, 6 * time.Second},
		{map[string]string{annWindow: "6s", annRetention: "6s"}, 12 * time.Second},
		{map[string]string{annRetention: "30s"}, 90 * time.Second},
	} {
		got, err := idleFrom(c.ann)
		if err != nil || got != c.want {
			t.Errorf("idleFrom(%v) = %s, %v; want %s", c.ann, got, err, c.want)
		}
	}
	if _, err := idleFrom(map[string]string{annWindow: "soon"}); err == nil {
		t.Error("idleFrom accepted window \"soon\"")
	}
}
