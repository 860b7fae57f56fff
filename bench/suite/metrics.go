package main

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics is what a /metrics endpoint served, parsed from Prometheus' text
// format.
type metrics map[string]*dto.MetricFamily

func parseMetrics(r io.Reader) (metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return fams, nil
}

// sum adds up the samples of the family name whose labels keep accepts
// (nil: all): counters' and gauges' values, histograms' and summaries'
// sums. found is false if the family is not there.
func (m metrics) sum(name string, keep func(labels map[string]string) bool) (total float64, found bool) {
	fam, ok := m[name]
	if !ok {
		return 0, false
	}
	for _, s := range fam.GetMetric() {
		if keep != nil {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !keep(labels) {
				continue
			}
		}
		switch {
		case s.Counter != nil:
			total += s.GetCounter().GetValue()
		case s.Gauge != nil:
			total += s.GetGauge().GetValue()
		case s.Histogram != nil:
			total += s.GetHistogram().GetSampleSum()
		case s.Summary != nil:
			total += s.GetSummary().GetSampleSum()
		case s.Untyped != nil:
			total += s.GetUntyped().GetValue()
		}
	}
	return total, true
}
