package builder_test

import (
	"context"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
)

func mapEventNone(context.Context, client.Reader, cloudevents.Event) ([]reconcile.Request, error) {
	return nil, nil
}

func TestWatchesEventsRecordsTheTrigger(t *testing.T) {
	f := builder.EventFilter{Filters: []builder.TriggerFilter{
		{Prefix: map[string]string{"type": "com.example.db."}},
		{Not: &builder.TriggerFilter{Exact: map[string]string{"subject": "ignored"}}},
	}}
	op, err := builder.New(scheme(t)).For(&corev1.Service{}).
		WatchesEvents("drift", f, mapEventNone).
		WatchesEvents("webhook", builder.EventFilter{Attributes: map[string]string{"type": "com.example.hook"}}, mapEventNone).
		Build(noop)
	if err != nil {
		t.Fatal(err)
	}
	if len(op.Events) != 2 || op.Events[0].Name != "drift" || op.Events[1].Name != "webhook" || op.Events[0].Map == nil {
		t.Fatalf("events = %+v", op.Events)
	}
	e := cloudevents.New()
	e.SetType("com.example.db.role-dropped")
	e.SetSubject("orders")
	if !op.Events[0].Filter.Match(e) || op.Events[1].Filter.Match(e) {
		t.Errorf("match: drift %v webhook %v, want true false", op.Events[0].Filter.Match(e), op.Events[1].Filter.Match(e))
	}
	e.SetSubject("ignored")
	if op.Events[0].Filter.Match(e) {
		t.Error("not(exact subject=ignored) let subject=ignored pass")
	}
}

func TestWatchesEventsRejectsBadFilters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter builder.EventFilter
		fn     builder.EventMapFunc
		want   string
	}{
		{"ok", builder.EventFilter{}, mapEventNone, "the filter is empty"},
		{"ok", builder.EventFilter{Attributes: map[string]string{"Type": "x"}}, mapEventNone, "attributes[Type]: attribute names start with a letter"},
		{"ok", builder.EventFilter{Attributes: map[string]string{"type": "x"}, Filters: []builder.TriggerFilter{{Exact: map[string]string{"source": "y"}}}},
			mapEventNone, "Knative ignores attributes when filters is set"},
		{"ok", builder.EventFilter{Filters: []builder.TriggerFilter{{Exact: map[string]string{"type": "x"}, Prefix: map[string]string{"source": "y"}}}},
			mapEventNone, "filters[0]: exact and prefix are set"},
		{"ok", builder.EventFilter{Filters: []builder.TriggerFilter{{}}}, mapEventNone, "filters[0]: no dialect set"},
		{"ok", builder.EventFilter{Filters: []builder.TriggerFilter{{All: []builder.TriggerFilter{{Suffix: map[string]string{"type": ""}}}}}},
			mapEventNone, "filters[0].all[0].suffix[type]: the value is empty"},
		{"ok", builder.EventFilter{Filters: []builder.TriggerFilter{{Not: &builder.TriggerFilter{Exact: map[string]string{"my-ext": "v"}}}}},
			mapEventNone, "filters[0].not.exact[my-ext]"},
		{"Bad_Name", builder.EventFilter{Attributes: map[string]string{"type": "x"}}, mapEventNone, `WatchesEvents("Bad_Name"): the name`},
		{"ok", builder.EventFilter{Attributes: map[string]string{"type": "x"}}, nil, "the map function is nil"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := builder.New(scheme(t)).For(&corev1.Service{}).WatchesEvents(tc.name, tc.filter, tc.fn).Build(noop)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
	_, err := builder.New(scheme(t)).For(&corev1.Service{}).
		WatchesEvents("a", builder.EventFilter{Attributes: map[string]string{"type": "x"}}, mapEventNone).
		WatchesEvents("a", builder.EventFilter{Attributes: map[string]string{"type": "y"}}, mapEventNone).Build(noop)
	if err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Fatalf("a name used twice: %v", err)
	}
}
