package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
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

// A change is matched with the first arrival of its object at or after
// it; a change replaced before it was sent shares the newer one's event.
func TestHubScaleLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b := hsObj{1, 3}, hsObj{2, 7}
	key := func(o hsObj) string { return hsNamespace(o.n) + "/" + hsCMName(o.j) }
	changes := []hsChange{{obj: a, t0: at(0)}, {obj: a, t0: at(10)}, {obj: b, t0: at(20)}, {obj: b, t0: at(30), err: errors.New("refused")}}
	arrivals := []hsArrival{{key(a), at(15)}, {key(a), at(-5)}, {key(b), at(19)}}
	ds, missing := latencies(changes, arrivals, func(int) bool { return true })
	want := []time.Duration{5 * time.Millisecond, 15 * time.Millisecond}
	if !slices.Equal(ds, want) || missing != 1 {
		t.Fatalf("latencies = %v, %d missing; want %v, 1 missing (b's arrival precedes its change; a failed change is not counted)", ds, missing, want)
	}
	if q := quantile(ds, .99); q != 15*time.Millisecond {
		t.Fatalf("p99 of %v = %s", ds, q)
	}
}
