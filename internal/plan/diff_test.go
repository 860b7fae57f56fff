package plan

import (
	"encoding/json"
	"strings"
	"testing"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after string
		want          []string // path before after
	}{
		{"same", `{"a":1}`, `{"a":1}`, nil},
		{"a field changed", `{"spec":{"x":"a","y":1}}`, `{"spec":{"x":"b","y":1}}`, []string{`spec.x "a" "b"`}},
		{"added and removed", `{"metadata":{"annotations":{"k":"v"}}}`, `{"metadata":{"labels":{"l":"1"}}}`,
			[]string{`metadata.annotations.k "v" `, `metadata.labels.l  "1"`}},
		{"a list item", `{"s":{"c":[{"r":"a"},{"r":"b"}]}}`, `{"s":{"c":[{"r":"a"},{"r":"c"}]}}`, []string{`s.c[1].r "b" "c"`}},
		{"a list of another length", `{"l":[1]}`, `{"l":[1,2]}`, []string{`l [1] [1,2]`}},
		{"what the API server derives is left out",
			`{"apiVersion":"v1","metadata":{"resourceVersion":"1","generation":1,"managedFields":[{"m":1}],"uid":"a"}}`,
			`{"metadata":{"resourceVersion":"2","generation":2,"managedFields":[{"m":2}],"uid":"a","creationTimestamp":"x"}}`, nil},
		{"a create lists every field", ``, `{"metadata":{"name":"n"},"data":{"k":"v"}}`, []string{`data.k  "v"`, `metadata.name  "n"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before map[string]any
			if tc.before != "" {
				before = obj(t, tc.before)
			}
			var got []string
			for _, c := range Diff(before, obj(t, tc.after)) {
				got = append(got, c.Path+" "+string(c.Before)+" "+string(c.After))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	update := Write{Verb: "update", Changes: []Change{{Path: "spec.x"}}}
	for _, tc := range []struct {
		name string
		r    Report
		want int
	}{
		{"nothing planned", Report{}, 0},
		{"an update that changes nothing", Report{Objects: []Object{{Writes: []Write{{Verb: "update"}}}}}, 0},
		{"a write the API server refused", Report{Objects: []Object{{Writes: []Write{{Verb: "create", Error: "denied"}}}}}, 0},
		{"a field would change", Report{Objects: []Object{{Writes: []Write{update}}}}, 2},
		{"an Event", Report{Objects: []Object{{Events: []Event{{Reason: "R"}}}}}, 2},
		{"a delete", Report{Objects: []Object{{Writes: []Write{{Verb: "delete"}}}}}, 2},
		{"an object failed", Report{Objects: []Object{{Writes: []Write{update}}, {Error: "panic"}}}, 1},
		{"a controller could not list", Report{Controllers: []Controller{{Error: "forbidden"}}}, 1},
		{"a write was refused", Report{Refused: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.ExitCode(); got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := &Report{Objects: []Object{{Controller: "c", Ref: Ref{Kind: "K", Namespace: "n", Name: "b"}, Round: 1, Writes: []Write{{Verb: "update", Changes: []Change{{Path: "p", After: json.RawMessage(`1`)}}}}},
		{Controller: "c", Ref: Ref{Kind: "K", Namespace: "n", Name: "a"}, Round: 1}}}
	r.Sort()
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	got, err := Read(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Objects[0].Name != "a" || got.ExitCode() != 2 {
		t.Errorf("read back %+v", got)
	}
	if _, err := Read(strings.NewReader(`{"apiVersion":"opzero.dev/plan/v0","controllers":null,"objects":null,"rounds":0}`)); err == nil || !strings.Contains(err.Error(), "this opzero reads "+APIVersion) {
		t.Errorf("another version: %v, want refused naming ours", err)
	}
}
