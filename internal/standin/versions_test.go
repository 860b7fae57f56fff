package standin

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestVersions: which event objects may stand in for a first Get, for the
// orders a watch, Knative's adapter and this instance's client produce.
func TestVersions(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	type step struct {
		event, observed, forget string // one of them
	}
	cases := []struct {
		name    string
		steps   []step
		current map[string]bool // resourceVersion -> may stand in
	}{
		{"nothing known: any event", nil, map[string]bool{"5": true}},
		{"events alone: the newest", []step{{event: "5"}, {event: "6"}}, map[string]bool{"6": true, "5": false}},
		{"an event older than this instance's write, arriving after it",
			[]step{{event: "5"}, {observed: "6"}, {observed: "7"}, {event: "6"}}, map[string]bool{"6": false, "7": true}},
		{"the watch caught up with the write: later events are newer",
			[]step{{event: "5"}, {observed: "6"}, {event: "6"}, {event: "8"}}, map[string]bool{"8": true, "6": false}},
		{"a redelivery of a replaced version",
			[]step{{event: "5"}, {event: "6"}, {event: "5"}}, map[string]bool{"5": false, "6": true}},
		{"a read of a version an event already carried confirms it",
			[]step{{observed: "6"}, {event: "7"}, {observed: "7"}, {event: "8"}}, map[string]bool{"8": true, "7": false}},
		{"a deletion forgets", []step{{observed: "6"}, {forget: "x"}, {event: "4"}}, map[string]bool{"4": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVersions()
			for _, s := range tc.steps {
				switch {
				case s.event != "":
					v.Event(key, s.event)
				case s.observed != "":
					v.Observed(key, s.observed)
				default:
					v.Forget(key)
				}
			}
			for rv, want := range tc.current {
				if got := v.Current(key, rv); got != want {
					t.Errorf("Current(%s) = %v, want %v", rv, got, want)
				}
			}
		})
	}
	var nilV *Versions
	nilV.Event(key, "1")
	nilV.Observed(key, "1")
	if !nilV.Current(key, "0") {
		t.Error("a nil Versions (classic mode) must let any object stand in")
	}
}
