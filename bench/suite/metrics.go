package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/kubernetes"
)

// metrics is what a /metrics endpoint served, parsed from Prometheus' text
// format.
type metrics map[string]*dto.MetricFamily

// parseMetrics decodes with expfmt.NewDecoder, which every supported
// prometheus/common has (NewTextParser is v0.65 and later).
func parseMetrics(r io.Reader) (metrics, error) {
	dec := expfmt.NewDecoder(r, expfmt.NewFormat(expfmt.TypeTextPlain))
	fams := metrics{}
	for {
		f := &dto.MetricFamily{}
		err := dec.Decode(f)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parsing metrics: %w", err)
		}
		fams[f.GetName()] = f
	}
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

// apiRequests counts the requests the API server has served so far, by
// "VERB resource[/subresource]" (apiserver_request_total; WATCH counts the
// watches opened, not the events they carried), and its work besides
// (apiWork's keys, isWork).
func (e *env) apiRequests(ctx context.Context) (map[string]float64, error) {
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		return nil, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	m, err := parseMetrics(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range m["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range s.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		k := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			k += "/" + l["subresource"]
		}
		out[k] += s.GetCounter().GetValue()
	}
	for k, v := range apiWork(m) {
		out[k] = v
	}
	return out, nil
}

// Keys of apiRequests' map that are not requests: what the API server sent
// and read besides (every resource).
const (
	workWatchEvents = "~watch events"
	workWatchKiB    = "~watch KiB"
	workBodyKiB     = "~request body KiB"
)

// isWork tells apiWork's keys from requests.
func isWork(k string) bool { return strings.HasPrefix(k, "~") }

// apiWork is the API server's work beyond counting requests: the watch
// events it sent (apiserver_watch_events_total) and their size
// (apiserver_watch_events_sizes), and the request bodies it read
// (apiserver_request_body_size_bytes), so far.
func apiWork(m metrics) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m["apiserver_watch_events_total"].GetMetric() {
		out[workWatchEvents] += s.GetCounter().GetValue()
	}
	for _, s := range m["apiserver_watch_events_sizes"].GetMetric() {
		out[workWatchKiB] += s.GetHistogram().GetSampleSum() / 1024
	}
	for _, s := range m["apiserver_request_body_size_bytes"].GetMetric() {
		out[workBodyKiB] += s.GetHistogram().GetSampleSum() / 1024
	}
	return out
}
