package hub

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// planHub is a hub whose discovery knows core/v1 ConfigMaps (read just
// now, so plan asks no API server), and a Subscription of it.
func planHub() (*Hub, *sub) {
	v1 := schema.GroupVersion{Version: "v1"}
	h := &Hub{kinds: &kinds{
		gvs:  map[schema.GroupVersion]*metav1.APIResourceList{v1: {APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}},
		read: map[schema.GroupVersion]time.Time{v1: time.Now()},
	}}
	return h, &sub{h: h, obj: &v1alpha1.Subscription{}}
}

func eventsSpec(events ...v1alpha1.EventType) v1alpha1.SubscriptionSpec {
	return v1alpha1.SubscriptionSpec{Operator: "op", ServiceAccountName: "op", Sink: v1alpha1.Destination{URI: "http://op"},
		Resources: []v1alpha1.SubscribedResource{{APIVersion: "v1", Kind: "ConfigMap", Events: events}}}
}

// TestPlanUnknownEvent: an events value the CRD's enum would refuse (a
// Subscription read past it) makes the spec not Valid with reason
// InvalidSpec, naming the field, the value and the values accepted; the
// three known values plan to an attachment that carries them.
func TestPlanUnknownEvent(t *testing.T) {
	h, s := planHub()
	_, _, err := h.plan(context.Background(), s, eventsSpec(v1alpha1.EventCreated, "patched"))
	if err == nil {
		t.Fatal("events [created, patched]: planned, want InvalidSpec")
	}
	if r := reasonOf(err); r != "InvalidSpec" {
		t.Errorf("reason %q, want InvalidSpec", r)
	}
	for _, want := range []string{"spec.resources[0].events[1]", `"patched"`, "created, updated or deleted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %s", err, want)
		}
	}

	atts, _, err := h.plan(context.Background(), s, eventsSpec(v1alpha1.EventCreated, v1alpha1.EventUpdated, v1alpha1.EventDeleted))
	if err != nil {
		t.Fatalf("events [created, updated, deleted]: %v", err)
	}
	if len(atts) != 1 || len(atts[0].events) != 3 {
		t.Fatalf("attachments %v, want one with the three events", atts)
	}
}

// TestSameAttachmentsComparesFilters: an edit of any filter of a
// resource (events, updatedWhen, skipObserved) makes the planned
// attachments differ from the wired ones, so that the hub wires the new
// ones; the same spec planned again is the same.
func TestSameAttachmentsComparesFilters(t *testing.T) {
	h, s := planHub()
	base := eventsSpec()
	base.Resources[0].Mode = v1alpha1.ModeResource
	plan := func(edit func(*v1alpha1.SubscribedResource)) []*attachment {
		t.Helper()
		spec := base
		spec.Resources = []v1alpha1.SubscribedResource{base.Resources[0]}
		edit(&spec.Resources[0])
		atts, _, err := h.plan(context.Background(), s, spec)
		if err != nil {
			t.Fatal(err)
		}
		return atts
	}
	was := plan(func(*v1alpha1.SubscribedResource) {})
	if !sameAttachments(was, plan(func(*v1alpha1.SubscribedResource) {})) {
		t.Fatal("the same spec planned twice: not the same attachments")
	}
	for what, edit := range map[string]func(*v1alpha1.SubscribedResource){
		"events":                  func(r *v1alpha1.SubscribedResource) { r.Events = []v1alpha1.EventType{v1alpha1.EventCreated} },
		"updatedWhen":             func(r *v1alpha1.SubscribedResource) { r.UpdatedWhen = []v1alpha1.UpdatedPart{v1alpha1.UpdatedLabels} },
		"skipObserved":            func(r *v1alpha1.SubscribedResource) { r.SkipObserved = &v1alpha1.SkipObserved{} },
		"skipObserved.labels":     func(r *v1alpha1.SubscribedResource) { r.SkipObserved = &v1alpha1.SkipObserved{Labels: true} },
		"skipObserved.annotation": func(r *v1alpha1.SubscribedResource) { r.SkipObserved = &v1alpha1.SkipObserved{Annotations: true} },
	} {
		if sameAttachments(was, plan(edit)) {
			t.Errorf("%s edited: the same attachments, so the edit would not apply until the hub restarts", what)
		}
	}
	skip := plan(func(r *v1alpha1.SubscribedResource) { r.SkipObserved = &v1alpha1.SkipObserved{} })
	if sameAttachments(skip, plan(func(r *v1alpha1.SubscribedResource) { r.SkipObserved = &v1alpha1.SkipObserved{Labels: true} })) {
		t.Error("skipObserved {} edited to {labels: true}: the same attachments")
	}
}
