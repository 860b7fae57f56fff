package sourcecmd

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDeliveryMetrics: the Delivered callback counts fired and late
// wakeups, and the pending gauge reads the source.
func TestDeliveryMetrics(t *testing.T) {
	pending := 7
	reg := prometheus.NewRegistry()
	delivered := observeDeliveries(reg, func() int { return pending })
	due := time.Now()
	delivered("ns", "a", due, due.Add(100*time.Millisecond)) // on time
	delivered("ns", "b", due, due.Add(3*time.Second))        // late
	got := map[string]float64{}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	want := map[string]float64{"opzero_wakeups_fired_total": 2, "opzero_wakeups_late_total": 1, "opzero_wakeups_pending": 7, "opzero_wakeup_lateness_seconds": 2}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
