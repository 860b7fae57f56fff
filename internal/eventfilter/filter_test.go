package eventfilter_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/opzero/opzero/internal/eventfilter"
)

// TestMatchAgreesWithKnative: every case of testdata/knative-cases.json is
// decided as Knative Eventing v0.50's own filter code decided it
// (testdata/knative-verdicts.json, written by hack/knative-filter-verdicts.sh).
func TestMatchAgreesWithKnative(t *testing.T) {
	var cases []struct {
		Name  string           `json:"name"`
		Spec  eventfilter.Spec `json:"spec"`
		Event json.RawMessage  `json:"event"`
	}
	var verdicts map[string]bool
	read(t, "testdata/knative-cases.json", &cases)
	read(t, "testdata/knative-verdicts.json", &verdicts)
	if len(cases) < 40 || len(verdicts) != len(cases) {
		t.Fatalf("%d cases, %d verdicts: run hack/knative-filter-verdicts.sh after changing the cases", len(cases), len(verdicts))
	}
	passes := 0
	for _, c := range cases {
		want, ok := verdicts[c.Name]
		if !ok {
			t.Fatalf("case %q has no verdict: run hack/knative-filter-verdicts.sh", c.Name)
		}
		var e event.Event
		if err := json.Unmarshal(c.Event, &e); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if got := c.Spec.Match(e); got != want {
			t.Errorf("%s: Match = %v, Knative says %v", c.Name, got, want)
		}
		if want {
			passes++
		}
	}
	if passes == 0 || passes == len(cases) {
		t.Fatalf("%d of %d cases pass: the table does not tell passing from failing", passes, len(cases))
	}
}

func read(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // "" = valid
	}{
		{`{"attributes":{"type":"x","myext":""}}`, ""},
		{`{"filters":[{"all":[{"exact":{"type":"x"}},{"not":{"suffix":{"source":"y"}}}]}]}`, ""},
		{`{"attributes":{"my-ext":"x"}}`, "attributes[my-ext]: attribute names start with a letter"},
		{`{"attributes":{"1type":"x"}}`, "attributes[1type]"},
		{`{"attributes":{"type":"x"},"filters":[{"exact":{"type":"x"}}]}`, "Knative ignores attributes when filters is set"},
		{`{"filters":[{"exact":{"type":"x"},"not":{"exact":{"type":"y"}}}]}`, "filters[0]: exact and not are set"},
		{`{"filters":[{}]}`, "filters[0]: no dialect set"},
		{`{"filters":[{"any":[{"prefix":{"type":""}}]}]}`, "filters[0].any[0].prefix[type]: the value is empty"},
		{`{"filters":[{"cesql":"type = 'x'"}]}`, "filters[0].cesql: the cesql dialect is not supported"},
		{`{"filters":[{"not":{"exact":{"Type":"x"}}}]}`, "filters[0].not.exact[Type]"},
	} {
		var s eventfilter.Spec
		if err := json.Unmarshal([]byte(tc.spec), &s); err != nil {
			t.Fatal(err)
		}
		err := s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.spec, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want it to say %q", tc.spec, err, tc.want)
		}
	}
}
