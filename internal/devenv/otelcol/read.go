package otelcol

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Data is what arrived: every span and every metric data point.
type Data struct {
	Spans  []Span
	Points []Point
}

// Span is one span as OTLP/JSON carries it (IDs in hex).
type Span struct {
	TraceID, SpanID, ParentSpanID, Name string
	Attrs                               map[string]string
	Resource                            map[string]string
}

// Point is one metric data point: a sum's or gauge's value, a histogram's
// count.
type Point struct {
	Metric   string
	Attrs    map[string]string
	Resource map[string]string
	Value    float64
	Time     uint64 // unix nanoseconds
}

// wire is the part of OTLP/JSON that Read looks at.
type wire struct {
	ResourceSpans []struct {
		Resource   resource `json:"resource"`
		ScopeSpans []struct {
			Spans []struct {
				TraceID      string `json:"traceId"`
				SpanID       string `json:"spanId"`
				ParentSpanID string `json:"parentSpanId"`
				Name         string `json:"name"`
				Attributes   []kv   `json:"attributes"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceMetrics []struct {
		Resource     resource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []struct {
				Name  string  `json:"name"`
				Sum   *points `json:"sum"`
				Gauge *points `json:"gauge"`
				Hist  *points `json:"histogram"`
				EHist *points `json:"exponentialHistogram"`
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
}

type resource struct {
	Attributes []kv `json:"attributes"`
}

type kv struct {
	Key   string `json:"key"`
	Value struct {
		String *string          `json:"stringValue"`
		Int    *json.RawMessage `json:"intValue"`
		Bool   *bool            `json:"boolValue"`
		Double *float64         `json:"doubleValue"`
	} `json:"value"`
}

type points struct {
	DataPoints []struct {
		Attributes []kv            `json:"attributes"`
		AsDouble   *float64        `json:"asDouble"`
		AsInt      json.RawMessage `json:"asInt"`
		Count      json.RawMessage `json:"count"`
		Time       json.RawMessage `json:"timeUnixNano"`
	} `json:"dataPoints"`
}

func attrs(l []kv) map[string]string {
	m := make(map[string]string, len(l))
	for _, a := range l {
		switch v := a.Value; {
		case v.String != nil:
			m[a.Key] = *v.String
		case v.Int != nil:
			m[a.Key] = unquote(*v.Int)
		case v.Bool != nil:
			m[a.Key] = strconv.FormatBool(*v.Bool)
		case v.Double != nil:
			m[a.Key] = strconv.FormatFloat(*v.Double, 'g', -1, 64)
		}
	}
	return m
}

// unquote reads an int64 OTLP/JSON writes as a string (or a number).
func unquote(r json.RawMessage) string {
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s
	}
	return string(r)
}

func number(r json.RawMessage) float64 {
	f, _ := strconv.ParseFloat(unquote(r), 64)
	return f
}

// Read parses the traces.jsonl and metrics.jsonl in dir (a missing file is
// no data).
func Read(dir string) (*Data, error) {
	d := &Data{}
	for _, name := range []string{"traces.jsonl", "metrics.jsonl"} {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 64<<20)
		for n := 1; s.Scan(); n++ {
			var w wire
			if err := json.Unmarshal(s.Bytes(), &w); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s line %d: %w", name, n, err)
			}
			d.add(&w)
		}
		err = s.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *Data) add(w *wire) {
	for _, rs := range w.ResourceSpans {
		res := attrs(rs.Resource.Attributes)
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				d.Spans = append(d.Spans, Span{TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Name: s.Name,
					Attrs: attrs(s.Attributes), Resource: res})
			}
		}
	}
	for _, rm := range w.ResourceMetrics {
		res := attrs(rm.Resource.Attributes)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				for _, ps := range []*points{m.Sum, m.Gauge, m.Hist, m.EHist} {
					if ps == nil {
						continue
					}
					for _, p := range ps.DataPoints {
						v := number(p.AsInt)
						switch {
						case p.AsDouble != nil:
							v = *p.AsDouble
						case p.Count != nil:
							v = number(p.Count)
						}
						d.Points = append(d.Points, Point{Metric: m.Name, Attrs: attrs(p.Attributes), Resource: res, Value: v, Time: uint64(number(p.Time))})
					}
				}
			}
		}
	}
}

// Latest is, for each series of metric (one instance's, with labels that
// contain match), the value of its newest point, summed over the series:
// for cumulative counters, the total of every instance.
func (d *Data) Latest(metric string, match map[string]string) float64 {
	type last struct {
		t uint64
		v float64
	}
	series := map[string]last{}
	for _, p := range d.Points {
		if p.Metric != metric || !contains(p.Attrs, match) {
			continue
		}
		k := fmt.Sprint(p.Resource["service.instance.id"], p.Attrs)
		if l, ok := series[k]; !ok || p.Time >= l.t {
			series[k] = last{p.Time, p.Value}
		}
	}
	sum := 0.0
	for _, l := range series {
		sum += l.v
	}
	return sum
}

// Instances lists the service.instance.id of the resources that sent metric.
func (d *Data) Instances(metric string) map[string]bool {
	out := map[string]bool{}
	for _, p := range d.Points {
		if p.Metric == metric {
			out[p.Resource["service.instance.id"]] = true
		}
	}
	return out
}

func contains(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Trace is the spans of one trace.
func (d *Data) Trace(id string) []Span {
	var out []Span
	for _, s := range d.Spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}
