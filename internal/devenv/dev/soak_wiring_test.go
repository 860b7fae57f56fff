package dev_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/resourceversion"
)

// soakWiring is one way the soak operator's events reach it, with the
// faults that wiring has.
type soakWiring struct {
	name   string // the subtest
	source string // manifests.Options.Source
	faults []string
	// sweep is the anti-entropy sweep's schedule (the full sweep's is
	// always out of reach).
	sweep, sweepText string
	// wakeups is the process (dev's name) that delivers the operator's
	// Wakeups: killing it is the fault of that name.
	wakeups string
	// everyChange: every object's last change must reach the operator as
	// an event of that object, and no sweep may be scheduled within the
	// run: convergence owes nothing to the periodic sweep.
	everyChange bool
}

// soakWirings: the Knative wiring (ApiServerSource adapters, PingSources,
// the wakeup source) sweeps every minute, as issue 18's soak always did;
// the hub wiring (one Subscription, the hub Deployment) has its sweeps out
// of reach, so that convergence proves every add and update was delivered
// (issue 26) — the hub's immediate sweep after a relist is allowed, and
// counted.
func soakWirings(ns string, now time.Time) []soakWiring {
	return []soakWiring{{
		name: "knative", source: manifests.SourceKnative,
		faults: []string{"kube-apiserver", "etcd", "adapter", "operator", "wakeup-source", "burst-at-zero"},
		sweep:  "* * * * *", sweepText: "every minute",
		wakeups: "Deployment " + ns + "/testop-wakeup-source",
	}, {
		name: "hub", source: manifests.SourceHub,
		faults: []string{"kube-apiserver", "etcd", "hub", "hub-replica", "operator", "burst-at-zero"},
		sweep:  outOfReach(now), sweepText: "out of reach (" + outOfReach(now) + ")",
		wakeups:     "Deployment " + manifests.HubNamespace + "/" + manifests.HubName,
		everyChange: true,
	}}
}

// outOfReach is a yearly schedule about half a year from now: midnight on
// the first of a month at least five months away.
func outOfReach(now time.Time) string {
	return fmt.Sprintf("0 0 1 %d *", (int(now.Month())+5)%12+1)
}

// sweepScheduledBy is the first time after from at which one of schedules
// fires (as the hub and mtping read them, in local time).
func sweepScheduledBy(from time.Time, schedules ...string) (time.Time, error) {
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	var first time.Time
	for _, s := range schedules {
		sched, err := p.Parse(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("schedule %q: %w", s, err)
		}
		if n := sched.Next(from); first.IsZero() || n.Before(first) {
			first = n
		}
	}
	return first, nil
}

// sweepTicks: the sweep deliveries the operator answered, and dev's own
// sweeps after an adapter's gap.
func sweepTicks(events []dev.Event) (delivered, devSweeps int) {
	for _, e := range events {
		switch {
		case e.Event == dev.EventDelivery && e.Wake == dev.WakeSweep:
			delivered++
		case e.Event == dev.EventSweep:
			devSweeps++
		}
	}
	return delivered, devSweeps
}

// hubLog counts what the hub's log says it did: relists after 410 Gone
// (each followed by a sweep tick at once) and events dropped after their
// retries.
func hubLog(path string) (relists, dropped int) {
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(l, "listing what changed since"):
			relists++
		case strings.Contains(l, "not delivered after retries; dropped"):
			dropped++
		}
	}
	return relists, dropped
}

// hubWatchLines are the lines of the hub's log about its watches: relists
// and failures (the times say which sweep tick followed which gap).
func hubWatchLines(path string) []string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "listing what changed since") || strings.Contains(l, "watch failed") {
			out = append(out, l)
		}
	}
	return out
}

// linesNaming is the last n lines of the operator's log at path that name
// the object ns/name (its key, or its name).
func linesNaming(path, ns, name string, n int) []string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, ns+"/"+name+`"`) || strings.Contains(l, `"`+name+`"`) || strings.Contains(l, ns+"/"+name+" ") {
			out = append(out, l)
		}
	}
	return out[max(0, len(out)-n):]
}

// undelivered lists the objects whose last change by the stream (at
// wrote[name], taken before the call) was not followed by an event of
// that object (create or update) that the operator answered 2xx; afterSweep
// lists those whose first such event came only after a sweep tick that
// followed the change (it may be the operator's write after that sweep).
func undelivered(ns string, names []string, wrote map[string]time.Time, events []dev.Event) (missed, afterSweep []string) {
	got := map[string][]time.Time{} // key -> arrivals of its answered events
	var sweeps []time.Time
	for _, e := range events {
		switch {
		case e.Event != dev.EventDelivery || e.Code/100 != 2:
		case e.Wake == dev.WakeSweep:
			sweeps = append(sweeps, e.Time)
		case e.Kind == "ConfigWatcher" && (e.Wake == dev.WakeCreate || e.Wake == dev.WakeUpdate):
			got[e.Key] = append(got[e.Key], e.Time)
		}
	}
	first := func(ts []time.Time, from time.Time) time.Time { // the earliest at or after from
		var f time.Time
		for _, t := range ts {
			if !t.Before(from) && (f.IsZero() || t.Before(f)) {
				f = t
			}
		}
		return f
	}
	for _, n := range names {
		w, ok := wrote[n]
		if !ok {
			continue // its write failed on the client's side: when it happened is unknown
		}
		ev, sw := first(got[ns+"/"+n], w), first(sweeps, w)
		switch {
		case ev.IsZero():
			missed = append(missed, fmt.Sprintf("%s: changed at %s, no event of it delivered since", n, w.Format(time.StampMilli)))
		case !sw.IsZero() && sw.Before(ev):
			afterSweep = append(afterSweep, fmt.Sprintf("%s: changed at %s, a sweep tick at %s, its first event since at %s",
				n, w.Format(time.StampMilli), sw.Format(time.StampMilli), ev.Format(time.StampMilli)))
		}
	}
	slices.Sort(missed)
	slices.Sort(afterSweep)
	return missed, afterSweep
}

// progressBehind lists the hub's progress entries of the Subscription
// that are behind the newest object of their collection: every change of
// an object that exists was delivered or filtered out, so its progress
// (status.progress, written every 2 s) must have moved past it.
func (s *soak) progressBehind() []string {
	sub := &unstructured.Unstructured{}
	sub.SetAPIVersion("opzero.dev/v1alpha1")
	sub.SetKind("Subscription")
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "testop"}, sub); err != nil {
		return []string{err.Error()}
	}
	newest := map[string]string{}
	cws, cms := &v1.ConfigWatcherList{}, &corev1.ConfigMapList{}
	if err := s.c.List(s.ctx, cws); err != nil {
		return []string{err.Error()}
	}
	if err := s.c.List(s.ctx, cms); err != nil {
		return []string{err.Error()}
	}
	for _, l := range []struct {
		key  string
		objs []metav1.Object
	}{{"k8spatterns.io/v1/ConfigWatcher", objects(cws.Items)}, {"v1/ConfigMap", objects(cms.Items)}} {
		for _, o := range l.objs {
			if c, err := resourceversion.CompareResourceVersion(o.GetResourceVersion(), newest[l.key]); newest[l.key] == "" || err == nil && c > 0 {
				newest[l.key] = o.GetResourceVersion()
			}
		}
	}
	progress, _, _ := unstructured.NestedSlice(sub.Object, "status", "progress")
	at := map[string]string{}
	for _, p := range progress {
		p, _ := p.(map[string]any)
		r, _ := p["resource"].(string)
		at[r], _ = p["resourceVersion"].(string)
	}
	var out []string
	for key, rv := range newest {
		if c, err := resourceversion.CompareResourceVersion(at[key], rv); at[key] == "" || err != nil || c < 0 {
			out = append(out, fmt.Sprintf("progress of %s at %q, its newest object at %s", key, at[key], rv))
		}
	}
	slices.Sort(out)
	return out
}

func objects[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}
