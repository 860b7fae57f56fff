package dev

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestLocalCommand: a Knative Service with dev.opzero.dev/command runs that
// command (its program found on PATH) instead of a ko:// image; a bad
// annotation is a clear error.
func TestLocalCommand(t *testing.T) {
	svc := func(ann string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "serving.knative.dev/v1", "kind": "Service",
			"metadata": map[string]any{"name": "hook", "namespace": "ns"},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"image": "python:3.12-slim"}}}}},
		}}
		if ann != "" {
			u.SetAnnotations(map[string]string{annCommand: ann})
		}
		return u
	}
	s, err := parseService(svc(`["sh", "hook.sh", "--flag"]`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Pkg != "" || len(s.Command) != 3 || !strings.HasSuffix(s.Command[0], "/sh") || s.Command[1] != "hook.sh" {
		t.Fatalf("command %q, pkg %q", s.Command, s.Pkg)
	}
	for ann, want := range map[string]string{
		"":                           "is not a ko:// image",
		`python3 hook.py`:            "want a JSON array",
		`[]`:                         "want a JSON array",
		`["no-such-program-opzero"]`: "no-such-program-opzero",
	} {
		if _, err := parseService(svc(ann)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("annotation %q: error %v, want one containing %q", ann, err, want)
		}
	}
}

// TestRewriteLongestFirst: the full in-cluster name is rewritten whole,
// never as its .svc prefix followed by ".cluster.local" (it was, one time
// in two: map order is random).
func TestRewriteLongestFirst(t *testing.T) {
	s := &serviceSpec{Name: "op", NS: "ns"}
	local := map[string]string{}
	for _, u := range s.clusterURLs() {
		local[u] = "http://127.0.0.1:4000"
	}
	for i := 0; i < 50; i++ {
		for in, want := range map[string]string{
			"--wakeup-sink=http://op.ns.svc.cluster.local": "--wakeup-sink=http://127.0.0.1:4000",
			"--wakeup-sink=http://op.ns.svc/path":          "--wakeup-sink=http://127.0.0.1:4000/path",
		} {
			if got := rewrite(in, local); got != want {
				t.Fatalf("rewrite(%q) = %q, want %q", in, got, want)
			}
		}
	}
}
