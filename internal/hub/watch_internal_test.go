package hub

import "testing"

// TestInheritRetires: a spec edit's new attachment inherits what the old
// one was handed as its resend bound, and the old one, retired in the same
// step, takes no change after it: a change the watch hands it between the
// edit and the rewire would otherwise go out from both, the new one's copy
// unmarked.
func TestInheritRetires(t *testing.T) {
	old := &attachment{pkey: "configmaps"}
	for _, rv := range []string{"10", "11"} {
		if old.add(rv, 1) == nil {
			t.Fatalf("add(%s) before the edit: nil, want a mark", rv)
		}
	}
	other := &attachment{pkey: "secrets"}
	next := &attachment{pkey: "configmaps", sub: &sub{}}
	if old.sent("12") {
		t.Fatalf("change 12 counted as sent before the edit")
	}
	inherit([]*attachment{next}, []*attachment{old, other})
	if !old.sent("12") || !other.sent("5") {
		t.Errorf("a retired attachment is still offered changes (sent false): the watch would filter them for it")
	}
	if next.sent("12") {
		t.Errorf("the successor counts change 12 as sent")
	}

	if next.resend != "11" {
		t.Errorf("resend bound %q, want 11 (the old attachment's newest handed change)", next.resend)
	}
	if m := old.add("12", 1); m != nil {
		t.Errorf("the retired attachment took change 12 after the edit")
	}
	old.pass("13") // a filtered change or a bookmark: no progress either
	if old.handed != "11" || len(old.seq) != 2 {
		t.Errorf("retired attachment handed %q with %d marks, want 11 and 2", old.handed, len(old.seq))
	}
	if other.add("5", 1) != nil {
		t.Errorf("an old attachment of another progress was not retired")
	}
	for rv, want := range map[string]bool{"9": true, "11": true, "12": false} {
		if got := next.replay(rv); got != want {
			t.Errorf("replay(%s) = %v, want %v", rv, got, want)
		}
	}

	// A later edit chains the bounds: the newest of handed, resend and
	// what a relist handed.
	next.add("12", 1)
	next.relisted = "14"
	third := &attachment{pkey: "configmaps", sub: &sub{}}
	inherit([]*attachment{third}, []*attachment{next})
	if third.resend != "14" {
		t.Errorf("second edit's bound %q, want 14", third.resend)
	}
}
