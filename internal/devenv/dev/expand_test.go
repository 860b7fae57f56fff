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

// TestRewrite: a Service's in-cluster URLs become its local URL, the long
// form whole (map order once left "http://127.0.0.1:8080.cluster.local",
// which the wakeup source could not parse).
func TestRewrite(t *testing.T) {
	s := &serviceSpec{Name: "op", NS: "ns"}
	local := map[string]string{}
	for _, c := range s.clusterURLs() {
		local[c] = "http://127.0.0.1:8080"
	}
	for in, want := range map[string]string{
		"--wakeup-sink=http://op.ns.svc.cluster.local":      "--wakeup-sink=http://127.0.0.1:8080",
		"--wakeup-sink=http://op.ns.svc":                    "--wakeup-sink=http://127.0.0.1:8080",
		"http://op.ns.svc.cluster.local/x http://op.ns.svc": "http://127.0.0.1:8080/x http://127.0.0.1:8080",
		"http://other.ns.svc":                               "http://other.ns.svc",
	} {
		for range 20 { // map order varies from call to call
			if got := rewrite(in, local); got != want {
				t.Fatalf("rewrite(%q) = %q, want %q", in, got, want)
			}
		}
	}
}
