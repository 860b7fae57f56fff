package cloudevent_test

import (
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/cloudevent"
)

// TestReplayExtension: an object event marked opzeroreplay "true" decodes
// as a replay, one unmarked (or "false") as not; any other value is bad
// input, refused with an error naming the extension.
func TestReplayExtension(t *testing.T) {
	obj := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}`)
	for _, tc := range []struct {
		value  any // nil: not set
		replay bool
		err    string
	}{
		{nil, false, ""},
		{"false", false, ""},
		{"true", true, ""},
		{"yes", false, `extension "opzeroreplay" is "yes"`},
	} {
		for _, mode := range []cloudevent.Mode{cloudevent.Resource, cloudevent.Reference} {
			ev, err := cloudevent.NewObjectEvent(mode, cloudevent.Update, obj, "configmaps")
			if err != nil {
				t.Fatal(err)
			}
			if tc.value != nil {
				ev.SetExtension(cloudevent.ReplayExtension, tc.value)
			}
			got, err := cloudevent.Decode(ev)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("%s, %v: error %v, want one saying %s", mode, tc.value, err, tc.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s, %v: %v", mode, tc.value, err)
				continue
			}
			if oe := got.(*cloudevent.ObjectEvent); oe.Replay != tc.replay {
				t.Errorf("%s, %v: Replay %v, want %v", mode, tc.value, oe.Replay, tc.replay)
			}
		}
	}
}
