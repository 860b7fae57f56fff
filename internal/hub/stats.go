package hub

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Stats are the hub's counters.
type Stats struct {
	sent, early, retries, dropped, deadLettered, filtered, coalesced, relists, sweeps, sweepsSkipped, wakeups, replayed, referenced prometheus.Counter
	watches, indexWatches, subscriptions, bucketsHeld                                                                               prometheus.Gauge
	otherVersions                                                                                                                   prometheus.GaugeFunc
	// Deployment sinks (target.go)
	targetWakes, targetStops, targetLeases, targetUp prometheus.Counter
	targetReady                                      prometheus.Histogram
	bucketChanges                                    atomic.Int64 // buckets won or lost
}

func newStats(el elector) *Stats {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "opzero_hub_" + name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "opzero_hub_" + name, Help: help})
	}
	return &Stats{
		sent: c("events_sent_total", "Events answered 2xx by their sink"),
		early: c("events_early_total", "Events answered by a starting pod of their sink's Knative Service, posted to it directly while the route "+
			"waited for the pod to be ready (they are among events_sent_total)"),
		retries:       c("retries_total", "Sends retried after a failure"),
		dropped:       c("events_dropped_total", "Events not delivered after their retries, with no dead-letter sink taking them"),
		deadLettered:  c("events_dead_lettered_total", "Events sent to a dead-letter sink"),
		filtered:      c("events_filtered_total", "Changes not sent: the owner, referencedBy, skipObserved, updatedWhen or events filter dropped them"),
		coalesced:     c("events_coalesced_total", "Changes replaced by a newer change of the same object before they were sent"),
		relists:       c("relists_total", "Watches that lost their resource version and listed what changed"),
		referenced:    c("events_referenced_total", "Reference-mode updates of objects that became referenced (referencedBy): their changes while unreferenced were not sent"),
		sweeps:        c("sweeps_total", "Sweep ticks sent"),
		sweepsSkipped: c("sweeps_skipped_total", "Anti-entropy sweep ticks not sent: every event since the last one was answered as reconciled or recorded durably, so the operator was not woken for it"),
		wakeups:       c("wakeups_total", "Wakeups delivered"),
		watches:       g("watches", "Shared watches open"),
		indexWatches:  g("index_watches", "Referrer indexes that watch their referrers themselves (the others are fed by a shared watch of the same objects)"),
		subscriptions: g("subscriptions", "Subscriptions served by this replica"),
		replayed: c("handoff_replayed_total", "Events sent after their Subscription's bucket was won (by this replica, or at its start) of changes from before: "+
			"the bucket's previous holder may have sent them too. Duplicates around a hand-off are at most these: after a graceful hand-off the sends it cut short, "+
			"after a crash the changes since its last progress write. Counted too: changes sent again after a spec edit that changed a Subscription's filters (they were sent under the old spec, maybe)"),
		bucketsHeld:  g("buckets_held", "Buckets of Subscriptions this replica serves"),
		targetWakes:  c("deployment_wakes_total", "Deployment sinks (unchanged operators) scaled from 0 to 1 replica: by a change let through, a sweep, or their longest sleep"),
		targetStops:  c("deployment_stops_total", "Deployment sinks scaled back to 0 once idle"),
		targetLeases: c("deployment_leases_released_total", "Leader-election Leases still held by a gone pod of a Deployment sink, released before the next pod waited on them"),
		targetUp:     c("deployment_up_seconds_total", "Time Deployment sinks ran between a wake and the stop that followed, in seconds"),
		targetReady: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "opzero_hub_deployment_ready_seconds",
			Help:    "Time from a Deployment sink's scale-up to a ready pod, in seconds",
			Buckets: []float64{0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300}}),
		otherVersions: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "opzero_hub_buckets_other_version",
			Help: "Buckets whose Lease is held by a replica of another hub version (or by a holder that wrote none: edited by hand)"},
			func() float64 { return float64(el.OtherVersions()) }),
	}
}

// Collectors are the metrics to register.
func (s *Stats) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.sent, s.early, s.retries, s.dropped, s.deadLettered, s.filtered, s.coalesced, s.relists, s.sweeps, s.sweepsSkipped, s.wakeups, s.referenced,
		s.watches, s.indexWatches, s.subscriptions, s.replayed, s.bucketsHeld, s.otherVersions,
		s.targetWakes, s.targetStops, s.targetLeases, s.targetUp, s.targetReady}
}

// Replayed is how many events were sent of changes from before their
// bucket was won: an upper bound of the duplicates around hand-offs.
func (s *Stats) Replayed() float64 { return read(s.replayed) }

// Early is how many events a starting pod answered directly (early.go).
func (s *Stats) Early() float64 { return read(s.early) }

// Sent is how many events were answered 2xx.
func (s *Stats) Sent() float64 { return read(s.sent) }

// Work counts what the hub did (sends, filtered changes, sweeps, wakeups,
// relists, buckets won or lost): it changes whenever the hub worked or
// took up or dropped Subscriptions.
func (s *Stats) Work() float64 {
	return read(s.sent) + read(s.filtered) + read(s.sweeps) + read(s.wakeups) + read(s.relists) + read(s.retries) +
		float64(s.bucketChanges.Load())
}

// IndexWatches is how many referrer indexes watch their referrers
// themselves.
func (s *Stats) IndexWatches() float64 {
	var m dto.Metric
	_ = s.indexWatches.Write(&m)
	return m.GetGauge().GetValue()
}

// Referenced is how many updates of objects that became referenced were
// queued (refIndex, Hub.tell).
func (s *Stats) Referenced() float64 { return read(s.referenced) }

// DeploymentWakes is how many times a Deployment sink was scaled up from 0.
func (s *Stats) DeploymentWakes() float64 { return read(s.targetWakes) }

// Filtered is how many changes the filters dropped.
func (s *Stats) Filtered() float64 { return read(s.filtered) }

func read(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// SweepsSkipped is how many anti-entropy sweep ticks were not sent: the
// hub vouched that they would find nothing.
func (s *Stats) SweepsSkipped() float64 { return read(s.sweepsSkipped) }
