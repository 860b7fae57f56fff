package main

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
)

// hsPlan is the hubscale part's cluster: ops operators, operator i in
// namespace hs-i with its own Subscription, and objects 1 KiB ConfigMaps
// spread evenly over those namespaces (object g is cm-<g/ops> in hs-<g%ops>).
// What each operator subscribes to, by i*10/ops:
//
//	0-3 (40%) configwatcher: ConfigWatchers of its namespace in Resource
//	    mode (skipObserved) and the ConfigMaps they name, Reference mode
//	    with referencedBy, as `opzero manifests --source=hub` writes it;
//	    cwPer ConfigWatchers each naming ConfigMap j = 20k+3
//	4-6 (30%) hot: ConfigMaps of its namespace labelled tier=hot (j%10 == 0),
//	    Resource mode
//	7-8 (20%) team: ConfigMaps of every namespace labelled team=t<k>,
//	    Reference mode (j%20 == 1 carry a team label, spread over the teams)
//	9   (10%) all: every ConfigMap of its namespace, Resource mode
//
// Every Subscription also has a sweep (hourly, minute i%60) and wakeups,
// as the generated ones do.
type hsPlan struct {
	ops, objects int
}

type hsKind int

const (
	hsConfigWatcher hsKind = iota
	hsHot
	hsTeam
	hsAll
)

func (k hsKind) String() string {
	return [...]string{"configwatcher", "hot", "team", "all"}[k]
}

func (p hsPlan) kind(i int) hsKind {
	switch d := i * 10 / p.ops; {
	case d < 4:
		return hsConfigWatcher
	case d < 7:
		return hsHot
	case d < 9:
		return hsTeam
	}
	return hsAll
}

// perNS is how many ConfigMaps a namespace holds (the first objects%ops
// namespaces one more).
func (p hsPlan) perNS(n int) int {
	c := p.objects / p.ops
	if n < p.objects%p.ops {
		c++
	}
	return c
}

// cwPer is how many ConfigWatchers a configwatcher namespace holds.
func (p hsPlan) cwPer() int { return min(50, (p.objects/p.ops-4)/20+1) }

// firstTeam and teams: the team operators are firstTeam .. firstTeam+teams-1.
func (p hsPlan) firstTeam() int {
	for i := range p.ops {
		if p.kind(i) == hsTeam {
			return i
		}
	}
	return 0
}

func (p hsPlan) teams() int {
	n := 0
	for i := range p.ops {
		if p.kind(i) == hsTeam {
			n++
		}
	}
	return n
}

func hsNamespace(n int) string { return fmt.Sprintf("hs-%03d", n) }
func hsCMName(j int) string    { return fmt.Sprintf("cm-%05d", j) }

// team is the team label of ConfigMap j in namespace n, or -1.
func (p hsPlan) team(n, j int) int {
	if j%20 != 1 || p.teams() == 0 {
		return -1
	}
	return (j/20 + n) % p.teams()
}

// labels of ConfigMap j in namespace n.
func (p hsPlan) labels(n, j int) map[string]string {
	l := map[string]string{"app": "hubscale"}
	if j%10 == 0 {
		l["tier"] = "hot"
	}
	if t := p.team(n, j); t >= 0 {
		l["team"] = fmt.Sprintf("t%02d", t)
	}
	return l
}

// subscribers are the operators a change of ConfigMap j in namespace n is
// delivered to.
func (p hsPlan) subscribers(n, j int) []int {
	var out []int
	switch p.kind(n) {
	case hsConfigWatcher:
		if j%20 == 3 && j/20 < p.cwPer() {
			out = append(out, n)
		}
	case hsHot:
		if j%10 == 0 {
			out = append(out, n)
		}
	case hsAll:
		out = append(out, n)
	}
	if t := p.team(n, j); t >= 0 {
		out = append(out, p.firstTeam()+t)
	}
	return out
}

// hsObj is one ConfigMap: namespace index and index within it.
type hsObj struct{ n, j int }

// targets are the ConfigMaps whose changes the stream sends to operator i
// (each delivered to i, maybe to another operator too).
func (p hsPlan) targets(i int) []hsObj {
	var out []hsObj
	switch p.kind(i) {
	case hsConfigWatcher:
		for k := range p.cwPer() {
			out = append(out, hsObj{i, 20*k + 3})
		}
	case hsHot:
		for j := 0; j < p.perNS(i); j += 10 {
			out = append(out, hsObj{i, j})
		}
	case hsAll:
		for j := 7; j < p.perNS(i); j += 20 {
			out = append(out, hsObj{i, j})
		}
	case hsTeam:
		t := i - p.firstTeam()
		for j := 1; j < p.objects/p.ops; j += 20 {
			for n := range p.ops {
				if p.team(n, j) == t {
					out = append(out, hsObj{n, j})
				}
			}
		}
	}
	return out
}

// stream is the order of the changes: round-robin over the operators, each
// going through its targets (a target comes again only after all of its
// operator's others).
func (p hsPlan) stream(changes int) []hsObj {
	tg := make([][]hsObj, p.ops)
	for i := range p.ops {
		tg[i] = p.targets(i)
	}
	out := make([]hsObj, 0, changes)
	for c := 0; len(out) < changes; c++ {
		i := c % p.ops
		if len(tg[i]) == 0 {
			continue
		}
		out = append(out, tg[i][(c/p.ops)%len(tg[i])])
	}
	return out
}

// configMap is ConfigMap j of namespace n: ~1 KiB of data and "t", the
// stream's timestamp (0 until changed).
func (p hsPlan) configMap(n, j int, payload string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: hsCMName(j), Namespace: hsNamespace(n), Labels: p.labels(n, j)},
		Data: map[string]string{"v": payload, "t": "0"}}
}

// configWatchers of a configwatcher namespace.
func (p hsPlan) configWatchers(n int) []*v1.ConfigWatcher {
	if p.kind(n) != hsConfigWatcher {
		return nil
	}
	var out []*v1.ConfigWatcher
	for k := range p.cwPer() {
		out = append(out, &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cw-%02d", k), Namespace: hsNamespace(n)},
			Spec: v1.ConfigWatcherSpec{ConfigMap: hsCMName(20*k + 3), PodSelector: map[string]string{"app": "none"}}})
	}
	return out
}

// hsAudience is operator i's sink audience.
func hsAudience(i int) string { return fmt.Sprintf("opzero:%s:op", hsNamespace(i)) }

// subscription is operator i's Subscription with its sink at url.
func (p hsPlan) subscription(i int, url string) *v1alpha1.Subscription {
	ns := hsNamespace(i)
	cm := v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap"}
	var res []v1alpha1.SubscribedResource
	switch p.kind(i) {
	case hsConfigWatcher:
		cm.Mode, cm.Namespaces = v1alpha1.ModeReference, []string{ns}
		cm.ReferencedBy = &v1alpha1.Referrer{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", FieldPath: "spec.configMap"}
		res = append(res, v1alpha1.SubscribedResource{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Mode: v1alpha1.ModeResource,
			Namespaces: []string{ns}, SkipObserved: &v1alpha1.SkipObserved{}}, cm)
	case hsHot:
		cm.Mode, cm.Namespaces, cm.LabelSelector = v1alpha1.ModeResource, []string{ns}, "tier=hot"
		res = append(res, cm)
	case hsTeam:
		cm.Mode, cm.LabelSelector = v1alpha1.ModeReference, fmt.Sprintf("team=t%02d", i-p.firstTeam())
		res = append(res, cm)
	case hsAll:
		cm.Mode, cm.Namespaces = v1alpha1.ModeResource, []string{ns}
		res = append(res, cm)
	}
	return &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns},
		Spec: v1alpha1.SubscriptionSpec{Operator: "op", ServiceAccountName: "op",
			Sink:      v1alpha1.Destination{URI: url, Audience: hsAudience(i)},
			Resources: res,
			Sweeps:    []v1alpha1.Sweep{{Name: "op-sweep", Schedule: fmt.Sprintf("%d * * * *", i%60)}},
			Wakeups:   true}}
}
