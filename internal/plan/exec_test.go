package plan

import (
	"context"
	"strings"
	"testing"
)

// TestBinaryBadInput: an operator that is neither a binary nor a package
// says so, without a go build error about go.mod.
func TestBinaryBadInput(t *testing.T) {
	for _, tc := range []struct{ operator, want string }{
		{"", "which operator?"},
		{"/nonexistent/operator", "no such file or folder"},
		{"./nonexistent", "no such file or folder"},
	} {
		_, err := binary(context.Background(), RunOptions{Operator: tc.operator, Dir: t.TempDir()}, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.operator, err, tc.want)
		}
	}
}
