package dev

import "testing"

// TestExpand: Kubernetes' rules for $(NAME) in env values.
func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for in, want := range map[string]string{
		"plain":      "plain",
		"$(A)-$(B)":  "1-two",
		"$(MISSING)": "$(MISSING)",
		"$$(A)":      "$(A)",
		"cost $5":    "cost $5",
		"end$":       "end$",
		"$(unclosed": "$(unclosed",
		"x$(A)y$$z":  "x1y$z",
	} {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
