package manifests_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// TestEverywhereUses: a kind owned through a cache of the project's own
// (Everywhere) beside its use through the manager's cache is one
// Subscription entry per use when the manager's cache holds the kind in
// some namespaces (owner everywhere, the rest there), and one entry when
// it holds it everywhere (the wider use wins: no owner filter). The
// Knative wiring keeps one ApiServerSource per kind either way.
func TestEverywhereUses(t *testing.T) {
	cm := description.Kind{Version: "v1", Kind: "ConfigMap", Resource: "configmaps"}
	owned := cm
	owned.Everywhere = true
	op := description.Controller{
		Name:    "op",
		Primary: description.Kind{Group: "example.com", Version: "v1", Kind: "Thing", Resource: "things"},
		Owned:   []description.Kind{owned},
		Watched: []description.Kind{cm},
	}
	scoped := &description.CacheScope{ByObject: []description.CacheKind{{Version: "v1", Kind: "ConfigMap", Namespaces: []string{"trust"}, LabelSet: true}}}
	for _, tc := range []struct {
		name  string
		cache *description.CacheScope
		want  []string
	}{
		{"scoped", scoped, []string{"ConfigMap ns=<nil> owner=Thing", "ConfigMap ns=[trust] owner=", "Thing ns=<nil> owner="}},
		{"unscoped", nil, []string{"ConfigMap ns=<nil> owner=", "Thing ns=<nil> owner="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := manifests.Input{ImportPath: "example.com/op/cmd/op", Operator: op, Cache: tc.cache}
			objs, err := manifests.Generate(in, manifests.Options{Namespace: "ops", Source: manifests.SourceHub, NoDurableTime: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				if o.Kind() != "Subscription" {
					continue
				}
				for _, r := range o.Obj["spec"].(map[string]any)["resources"].([]any) {
					m := r.(map[string]any)
					owner := ""
					if ow, ok := m["owner"].(map[string]any); ok {
						owner = fmt.Sprint(ow["kind"])
					}
					got = append(got, fmt.Sprintf("%s ns=%v owner=%s", m["kind"], m["namespaces"], owner))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Subscription resources %q, want %q", got, tc.want)
			}
			objs, err = manifests.Generate(in, manifests.Options{Namespace: "ops", Source: manifests.SourceKnative, NoDurableTime: true})
			if err != nil {
				t.Fatal(err)
			}
			sources := 0
			for _, o := range objs {
				if o.Kind() == "ApiServerSource" {
					sources++
				}
			}
			if sources != 2 {
				t.Errorf("--source=knative: %d ApiServerSources, want one per kind (2)", sources)
			}
		})
	}
}
