package standin

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// TestVersions: which event objects may stand in for a first Get, for the
// orders a watch, Knative's adapter and this instance's client produce.
func TestVersions(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	type step struct {
		event, observed, forget, gone string // one of them
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
		{"a delete asked for forgets", []step{{observed: "6"}, {forget: "x"}, {event: "4"}}, map[string]bool{"4": true}},
		{"no event stands in after a deletion was seen, known version or not",
			[]step{{event: "5"}, {gone: "x"}, {event: "4"}, {event: "9"}}, map[string]bool{"4": false, "5": false, "9": false}},
		{"a deletion seen by a fresh instance", []step{{gone: "x"}, {event: "4"}}, map[string]bool{"4": false}},
		{"a read after the deletion finds a new object: events carry it again",
			[]step{{event: "5"}, {gone: "x"}, {observed: "12"}, {event: "12"}, {event: "13"}}, map[string]bool{"13": true, "12": false, "5": false}},
		{"an event of the new object that came before the read confirms it",
			[]step{{gone: "x"}, {event: "12"}, {observed: "12"}, {event: "13"}}, map[string]bool{"13": true, "12": false}},
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
				case s.gone != "":
					v.Gone(key)
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
	nilV.Gone(key)
	if !nilV.Current(key, "0") {
		t.Error("a nil Versions (classic mode) must let any object stand in")
	}
}

// TestCacheAfterADeletion: an event cache never serves an object from
// before a deletion it saw (an event, or a read that found it gone), even
// when the late event carries a version it never saw; a read of the new
// object of that name makes events count again.
func TestCacheAfterADeletion(t *testing.T) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	key := types.NamespacedName{Namespace: "ns", Name: "cm"}
	for _, how := range []string{"delete event", "read found it gone"} {
		c := NewCache(gvk)
		c.Event(gvk, key, "5", []byte(`{"v":5}`))
		if how == "delete event" {
			c.Gone(gvk, key)
		} else {
			c.Observed(gvk, key, "")
		}
		c.Event(gvk, key, "4", []byte(`{"v":4}`))
		if got := c.Get(gvk, key); got != nil {
			t.Errorf("%s: served %s after the deletion", how, got)
		}
		c.Observed(gvk, key, "12")
		c.Event(gvk, key, "13", []byte(`{"v":13}`))
		if got := c.Get(gvk, key); got != nil {
			t.Errorf("%s: served %s before an event carried the version read", how, got)
		}
		c.Event(gvk, key, "12", []byte(`{"v":12}`))
		c.Event(gvk, key, "14", []byte(`{"v":14}`))
		if got := string(c.Get(gvk, key)); got != `{"v":14}` {
			t.Errorf("%s: served %q, want the newest event's object", how, got)
		}
	}
}

// TestVersionsRememberABoundedNumberOfDeletions: past maxGone deletions
// the oldest is forgotten (its key then knows nothing: any event stands
// in), the newest are kept, and a key deleted again keeps its newer mark.
func TestVersionsRememberABoundedNumberOfDeletions(t *testing.T) {
	v := NewVersions()
	key := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)} }
	v.Gone(key(0))
	v.Gone(key(1))
	v.Gone(key(0)) // again: its first mark is the oldest, this one is not
	for i := 2; i < maxGone; i++ {
		v.Gone(key(i))
	}
	// maxGone+1 marks so far: the first (key 0's first) is dropped, key 0 stays gone
	if v.Current(key(0), "9") || v.Current(key(1), "9") {
		t.Fatal("a deletion within the newest maxGone was forgotten")
	}
	v.Gone(key(maxGone)) // drops key 1's mark
	if !v.Current(key(1), "9") {
		t.Error("the oldest deletion past maxGone is still remembered")
	}
	if v.Current(key(0), "9") || v.Current(key(maxGone), "9") {
		t.Error("a newer deletion was forgotten")
	}
	if len(v.graves) > maxGone {
		t.Errorf("%d marks held, want at most %d", len(v.graves), maxGone)
	}
}
