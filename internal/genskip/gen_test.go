package genskip

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestObserved: only a generation the status says was reconciled, of an
// object not being deleted, is observed.
func TestObserved(t *testing.T) {
	for _, tc := range []struct {
		gen, observed     int64
		has, deleting, ok bool
	}{
		{2, 2, true, false, true},
		{1, 2, true, false, true},
		{3, 2, true, false, false},
		{2, 2, false, false, false}, // no status.observedGeneration
		{2, 2, true, true, false},   // being deleted
		{0, 0, true, false, false},  // a kind without generations
	} {
		if got := Observed(tc.gen, tc.observed, tc.has, tc.deleting); got != tc.ok {
			t.Errorf("Observed(%d, %d, has %v, deleting %v) = %v, want %v", tc.gen, tc.observed, tc.has, tc.deleting, got, tc.ok)
		}
	}
}

// TestFingerprint: finalizers always count (in any order), labels and
// annotations only when opted into.
func TestFingerprint(t *testing.T) {
	base := Fingerprint(Options{}, []string{"a", "b"}, map[string]string{"l": "1"}, map[string]string{"n": "1"})
	if Fingerprint(Options{}, []string{"b", "a"}, map[string]string{"l": "2"}, map[string]string{"n": "2"}) != base {
		t.Error("without options, a finalizer order or a label or annotation change counted")
	}
	if Fingerprint(Options{}, []string{"a"}, map[string]string{"l": "1"}, map[string]string{"n": "1"}) == base {
		t.Error("a removed finalizer did not count")
	}
	if Fingerprint(Options{OnLabelChange: true}, nil, map[string]string{"l": "1"}, nil) == Fingerprint(Options{OnLabelChange: true}, nil, map[string]string{"l": "2"}, nil) {
		t.Error("a label change did not count with OnLabelChange")
	}
	if Fingerprint(Options{OnAnnotationChange: true}, nil, nil, map[string]string{"n": "1"}) == Fingerprint(Options{OnAnnotationChange: true}, nil, nil, nil) {
		t.Error("an annotation change did not count with OnAnnotationChange")
	}
	// A label's key and value never run into the next one.
	if Fingerprint(Options{OnLabelChange: true}, nil, map[string]string{"ab": "c"}, nil) == Fingerprint(Options{OnLabelChange: true}, nil, map[string]string{"a": "bc"}, nil) {
		t.Error("labels ab=c and a=bc have one fingerprint")
	}
}

// TestObservedGeneration reads status.observedGeneration of an
// unstructured object, and reports its absence.
func TestObservedGeneration(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"observedGeneration": int64(4)}}}
	if g, ok := ObservedGeneration(u); !ok || g != 4 {
		t.Errorf("got %d %v, want 4 true", g, ok)
	}
	if _, ok := ObservedGeneration(&unstructured.Unstructured{Object: map[string]any{}}); ok {
		t.Error("an object without status.observedGeneration has one")
	}
}
