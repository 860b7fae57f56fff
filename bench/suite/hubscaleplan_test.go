package main

import (
	"slices"
	"strings"
	"testing"
)

// Every change of the stream goes to the operator it targets, by the
// plan's own rule and by what the Subscription selects.
func TestHubScalePlanTargetsAreSubscribed(t *testing.T) {
	for _, p := range []hsPlan{{100, 100_000}, {100, 10_000}, {10, 1000}, {20, 2345}} {
		kinds := map[hsKind]int{}
		for i := range p.ops {
			kinds[p.kind(i)]++
			tg := p.targets(i)
			if len(tg) == 0 {
				t.Fatalf("%+v: operator %d (%s) has no targets", p, i, p.kind(i))
			}
			for _, o := range tg {
				if o.j >= p.perNS(o.n) {
					t.Fatalf("%+v: operator %d targets %s/%s, which is not created", p, i, hsNamespace(o.n), hsCMName(o.j))
				}
				if !slices.Contains(p.subscribers(o.n, o.j), i) {
					t.Fatalf("%+v: operator %d targets %s/%s but is not among its subscribers %v", p, i, hsNamespace(o.n), hsCMName(o.j), p.subscribers(o.n, o.j))
				}
				if !p.selects(i, o) {
					t.Fatalf("%+v: operator %d's Subscription does not select %s/%s", p, i, hsNamespace(o.n), hsCMName(o.j))
				}
			}
		}
		if len(kinds) != 4 {
			t.Fatalf("%+v: kinds %v, want all four", p, kinds)
		}
		if got := len(p.stream(5000)); got != 5000 {
			t.Fatalf("%+v: stream of %d changes, want 5000", p, got)
		}
	}
}

// selects reads operator i's Subscription as the hub would for ConfigMap o
// (the referencedBy filter by the ConfigWatchers created).
func (p hsPlan) selects(i int, o hsObj) bool {
	sub := p.subscription(i, "http://127.0.0.1:1")
	labels := p.labels(o.n, o.j)
	for _, r := range sub.Spec.Resources {
		if r.Kind != "ConfigMap" {
			continue
		}
		if len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, hsNamespace(o.n)) {
			continue
		}
		if r.LabelSelector != "" {
			k, v, _ := strings.Cut(r.LabelSelector, "=")
			if labels[k] != v {
				continue
			}
		}
		if r.ReferencedBy != nil {
			named := false
			for _, cw := range p.configWatchers(o.n) {
				named = named || cw.Spec.ConfigMap == hsCMName(o.j)
			}
			if !named {
				continue
			}
		}
		return true
	}
	return false
}
