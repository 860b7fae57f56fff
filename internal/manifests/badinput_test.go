package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// TestBadInputSaysWhatToDo: each mistake gets an error that names it and
// says what to do.
func TestBadInputSaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	defer manifests.SetDescribeTimeout(5 * time.Second)()
	for _, tc := range []struct {
		name, pkg string
		want      []string
	}{
		{"no package", "", []string{"pass --operator"}},
		{"unknown package", "./examples/nosuchoperator", []string{"./examples/nosuchoperator", "Go package path of the operator's main"}},
		{"not a command", "./builder", []string{"package builder, not a command"}},
		{"not an opzero binary", "./internal/manifests/testdata/notdescribing", []string{"exited without describing itself", "operator.New"}},
		{"refuses with its own reason", "./internal/manifests/testdata/refusing", []string{"exited with exit status 1 before describing itself; its output ends:\nproblem running manager: serverless mode: webhooks (/validate-x) cannot be served serverless\n(if its main"}},
		{"serves instead", "./internal/manifests/testdata/serving", []string{"did not describe itself within 5s", "kept running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := manifests.Describe(ctx, repoRoot(t), tc.pkg)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    manifests.Options
		want string
	}{
		{manifests.Options{Mode: "lambda"}, `--mode="lambda": want serverless or classic`},
		{manifests.Options{Namespace: "Ops"}, `--namespace="Ops"`},
		{manifests.Options{Broker: "a_b"}, `--broker="a_b"`},
		{manifests.Options{Delivery: manifests.Delivery{BackoffPolicy: "random"}}, "want exponential or linear"},
		{manifests.Options{Delivery: manifests.Delivery{BackoffDelay: "500ms"}}, "ISO-8601"},
		{manifests.Options{Source: "mesh"}, `--source="mesh": want knative or hub`},
		{manifests.Options{Mode: manifests.Classic, Source: manifests.SourceHub}, "--source=hub: the hub delivers to serverless operators"},
	} {
		if _, err := manifests.Generate(in, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
}

// TestBadEventFilters: a description whose event filters Knative would
// refuse or misread, or options that conflict with them, are refused with
// an error that says what to do.
func TestBadEventFilters(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		events []description.EventWatch
		o      manifests.Options
		want   string
	}{
		{eventWatches, manifests.Options{Broker: "default", TriggerType: "x"}, "drop --trigger-type"},
		{[]description.EventWatch{{Name: "x", Attributes: map[string]string{"Type": "a"}}}, manifests.Options{}, "attributes[Type]"},
		{[]description.EventWatch{{Name: "x", Filters: []description.TriggerFilter{{}}}}, manifests.Options{}, "filters[0]: no dialect set"},
		{[]description.EventWatch{{Name: "x", Filters: []description.TriggerFilter{{Exact: map[string]string{"type": "a"}, Not: &description.TriggerFilter{}}}}},
			manifests.Options{}, "exact and not are set"},
	} {
		in := in
		in.Operator.Events = tc.events
		if _, err := manifests.Generate(in, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.events, err, tc.want)
		}
	}
}

// TestBadSourceBuildsNothing: a bad --source (or --source=hub with
// --mode=classic) is refused before the operator is built or described.
func TestBadSourceBuildsNothing(t *testing.T) {
	for _, o := range []manifests.Options{{Source: "Hub"}, {Mode: manifests.Classic, Source: manifests.SourceHub}} {
		// the package does not exist: an error about it would mean it was looked for
		_, err := manifests.Build(context.Background(), repoRoot(t), "./examples/nosuchoperator", o)
		if err == nil || !strings.Contains(err.Error(), "--source") || strings.Contains(err.Error(), "nosuchoperator") {
			t.Errorf("%+v: got %v, want the --source error before the package is looked at", o, err)
		}
	}
}
