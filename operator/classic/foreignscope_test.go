package classic

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/adopt"
)

// TestEverywhere: the kinds a controller watches through a cache the
// project built are described as watched everywhere; one whose every such
// source maps to its owner of the primary kind is owned there (the hub
// sends only owned objects), and keeps its watched use in the manager
// cache's scope when a source on that cache watches it too.
func TestEverywhere(t *testing.T) {
	bundle := schema.GroupKind{Group: "b.example", Kind: "Bundle"}
	other := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	cm, secret, pod, ns := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, schema.GroupVersionKind{Version: "v1", Kind: "Secret"},
		schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	svc := schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	watched := func(gvks ...schema.GroupVersionKind) []builder.Watch {
		var out []builder.Watch
		for _, g := range gvks {
			out = append(out, builder.Watch{Kind: builder.Kind{GVK: g}})
		}
		return out
	}
	op := &builder.Controller{Primary: builder.Kind{GVK: bundle.WithVersion("v1")}, Watched: watched(cm, secret, pod, ns, svc)}
	everywhere(op, bundle, []adopt.ForeignSource{
		{GVK: cm, Owner: &bundle, OnlyController: true, Shared: true}, // targets everywhere, sources in the trust namespace
		{GVK: secret, Owner: &bundle, OnlyController: true},           // owned, only through the project's cache
		{GVK: svc, Owner: &bundle},                                    // any owner: no filter of the hub's says that
		{GVK: pod, Owner: &other},                                     // owned by another kind: watched everywhere
	})
	got := map[string]string{}
	for _, w := range op.Watched {
		got["watched "+w.GVK.Kind] = map[bool]string{true: "everywhere", false: "scoped"}[w.Everywhere]
	}
	for _, k := range op.Owned {
		got["owned "+k.GVK.Kind] = map[bool]string{true: "everywhere", false: "scoped"}[k.Everywhere]
	}
	want := map[string]string{"watched ConfigMap": "scoped", "owned ConfigMap": "everywhere", "owned Secret": "everywhere",
		"watched Pod": "everywhere", "watched Namespace": "scoped", "watched Service": "everywhere"}
	if len(got) != len(want) {
		t.Errorf("uses %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
