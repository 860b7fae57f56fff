package main

import (
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
)

func TestIdleTicksIn(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 16, 44, 0, time.Local)
	for _, c := range []struct {
		schedule string
		d        time.Duration
		want     int
	}{
		{"*/10 * * * *", time.Hour, 6},
		{"*/10 * * * *", 2 * time.Minute, 0},
		{"17 */6 * * *", 2 * time.Minute, 1},
		{"17 */6 * * *", time.Hour, 1},
		{"17 */6 * * *", 5 * time.Hour, 1},
		{"17 */6 * * *", 7 * time.Hour, 2},
		{"not a schedule", time.Hour, 0},
	} {
		if got := ticksIn(c.schedule, t0, t0.Add(c.d)); got != c.want {
			t.Errorf("ticksIn(%q, %s) = %d, want %d", c.schedule, c.d, got, c.want)
		}
	}
}

// One operator's window is read from its own events only: the other's
// instance and deliveries beside it count for nothing.
func TestIdleWindowOfOneService(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := idleProjects[0]
	evs := []dev.Event{
		{Time: at(10), Event: dev.EventProcessStarted, Service: "other/op", ColdStart: true},
		{Time: at(10), Event: dev.EventDelivery, Service: "other/op", Wake: dev.WakeSweep, Source: "/apis/v1/namespaces/other/pingsources/op-sweep"},
		{Time: at(70), Event: dev.EventProcessStopped, Service: "other/op"},
		{Time: at(100), Event: dev.EventProcessStarted, Service: p.service(), ColdStart: true},
		{Time: at(100), Event: dev.EventDelivery, Service: p.service(), Wake: dev.WakeSweep, Source: "/apis/v1/namespaces/" + p.ns + "/pingsources/" + p.name + "-full-sweep"},
		{Time: at(101), Event: dev.EventReconciled, Service: p.service(), Reconciled: 50},
		{Time: at(161), Event: dev.EventProcessStopped, Service: p.service()},
	}
	var res churnResult
	churnWindow(ofService(evs, p.service()), t0, at(600), &res, ofServices)
	if res.up != 61*time.Second || res.coldStarts != 1 || res.deliveries != 1 || res.reconciles != 50 {
		t.Errorf("got %+v, want 61s up, 1 cold start, 1 delivery, 50 reconciled", res)
	}
	if n := sweepDeliveries(evs, p, p.name+"-full-sweep", t0, at(600)); n != 1 {
		t.Errorf("full sweeps delivered: %d, want 1", n)
	}
	if n := sweepDeliveries(evs, p, p.name+"-sweep", t0, at(600)); n != 0 {
		t.Errorf("anti-entropy sweeps delivered: %d, want 0", n)
	}
}
