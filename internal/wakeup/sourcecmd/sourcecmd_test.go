package sourcecmd

import (
	"context"
	"strings"
	"testing"
)

// TestBadPageSize: --page-size below 1 is refused before anything else is
// read (no KUBECONFIG is needed to see it).
func TestBadPageSize(t *testing.T) {
	for _, n := range []int{0, -5} {
		t.Setenv("KUBECONFIG", "/nonexistent")
		err := Flags{PageSize: n}.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "--page-size") {
			t.Errorf("--page-size %d: %v, want an error naming --page-size", n, err)
		}
	}
}
