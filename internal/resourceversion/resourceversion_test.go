package resourceversion

import (
	"errors"
	"testing"
)

func TestCompareResourceVersion(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
		err  bool
	}{
		{"1", "1", 0, false},
		{"1", "2", -1, false},
		{"10", "9", 1, false},
		{"123", "124", -1, false},
		{"99", "100", -1, false},
		{"", "1", 0, true},
		{"1", "01", 0, true},
		{"1a", "1", 0, true},
		{"1", "-1", 0, true},
	} {
		got, err := CompareResourceVersion(c.a, c.b)
		if c.err {
			var inv InvalidResourceVersion
			if !errors.As(err, &inv) {
				t.Errorf("CompareResourceVersion(%q, %q) = %d, %v: want InvalidResourceVersion", c.a, c.b, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("CompareResourceVersion(%q, %q) = %d, %v: want %d", c.a, c.b, got, err, c.want)
		}
	}
}
