package hub

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Stats are the hub's counters.
type Stats struct {
	sent, retries, dropped, deadLettered, filtered, coalesced, relists, sweeps, wakeups prometheus.Counter
	watches, indexWatches, subscriptions                                                prometheus.Gauge
}

func newStats() *Stats {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "opzero_hub_" + name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "opzero_hub_" + name, Help: help})
	}
	return &Stats{
		sent:          c("events_sent_total", "Events answered 2xx by their sink"),
		retries:       c("retries_total", "Sends retried after a failure"),
		dropped:       c("events_dropped_total", "Events not delivered after their retries, with no dead-letter sink taking them"),
		deadLettered:  c("events_dead_lettered_total", "Events sent to a dead-letter sink"),
		filtered:      c("events_filtered_total", "Changes not sent: the owner, referencedBy or skipObserved filter dropped them"),
		coalesced:     c("events_coalesced_total", "Changes replaced by a newer change of the same object before they were sent"),
		relists:       c("relists_total", "Watches that lost their resource version and listed what changed"),
		sweeps:        c("sweeps_total", "Sweep ticks sent"),
		wakeups:       c("wakeups_total", "Wakeups delivered"),
		watches:       g("watches", "Shared watches open"),
		indexWatches:  g("index_watches", "Referrer indexes that watch their referrers themselves (the others are fed by a shared watch of the same objects)"),
		subscriptions: g("subscriptions", "Subscriptions known"),
	}
}

// Collectors are the metrics to register.
func (s *Stats) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.sent, s.retries, s.dropped, s.deadLettered, s.filtered, s.coalesced, s.relists, s.sweeps, s.wakeups, s.watches, s.indexWatches, s.subscriptions}
}

// Sent is how many events were answered 2xx.
func (s *Stats) Sent() float64 { return read(s.sent) }

// Work counts what the hub did (sends, filtered changes, sweeps, wakeups,
// relists): it changes whenever the hub worked.
func (s *Stats) Work() float64 {
	return read(s.sent) + read(s.filtered) + read(s.sweeps) + read(s.wakeups) + read(s.relists) + read(s.retries)
}

// IndexWatches is how many referrer indexes watch their referrers
// themselves.
func (s *Stats) IndexWatches() float64 {
	var m dto.Metric
	_ = s.indexWatches.Write(&m)
	return m.GetGauge().GetValue()
}

// Filtered is how many changes the filters dropped.
func (s *Stats) Filtered() float64 { return read(s.filtered) }

func read(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
