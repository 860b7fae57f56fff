package main

import (
	"strings"
	"testing"
)

// TestMetricsSum: the API server's request counter filtered by labels, and
// an operator's reconcile-time histogram (its _sum), from the text format.
func TestMetricsSum(t *testing.T) {
	const text = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="leases",subresource="",verb="POST"} 7
apiserver_request_total{code="200",resource="leases",subresource="",verb="DELETE"} 5
apiserver_request_total{code="200",resource="leases",subresource="",verb="GET"} 100
apiserver_request_total{code="200",resource="configwatchers",subresource="status",verb="PUT"} 12
apiserver_request_total{code="200",resource="configwatchers",subresource="",verb="PUT"} 3
# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_bucket{controller="a",le="+Inf"} 2
controller_runtime_reconcile_time_seconds_sum{controller="a"} 0.25
controller_runtime_reconcile_time_seconds_count{controller="a"} 2
controller_runtime_reconcile_time_seconds_bucket{controller="b",le="+Inf"} 1
controller_runtime_reconcile_time_seconds_sum{controller="b"} 0.5
controller_runtime_reconcile_time_seconds_count{controller="b"} 1
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	writes, _ := m.sum("apiserver_request_total", func(l map[string]string) bool { return l["resource"] == "leases" && l["verb"] != "GET" })
	status, _ := m.sum("apiserver_request_total", func(l map[string]string) bool { return l["subresource"] == "status" })
	busy, found := m.sum("controller_runtime_reconcile_time_seconds", nil)
	if writes != 12 || status != 12 || busy != 0.75 || !found {
		t.Errorf("lease writes %v, status writes %v, reconcile time %v (found %v); want 12, 12, 0.75, true", writes, status, busy, found)
	}
	if _, found := m.sum("no_such_metric", nil); found {
		t.Error("a family not served was found")
	}
	if _, err := parseMetrics(strings.NewReader("not { a metric\n")); err == nil {
		t.Error("garbage parsed")
	}
}

// TestAPIWork: the watch events the API server sent, their size and the
// request bodies it read, summed over every resource, from the text format.
func TestAPIWork(t *testing.T) {
	const text = `# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="example.com",kind="ConfigWatcher",version="v1"} 30
apiserver_watch_events_total{group="",kind="ConfigMap",version="v1"} 12
# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{group="example.com",kind="ConfigWatcher",version="v1",le="+Inf"} 30
apiserver_watch_events_sizes_sum{group="example.com",kind="ConfigWatcher",version="v1"} 40960
apiserver_watch_events_sizes_count{group="example.com",kind="ConfigWatcher",version="v1"} 30
# TYPE apiserver_request_body_size_bytes histogram
apiserver_request_body_size_bytes_bucket{resource="configwatchers.example.com",verb="create",le="+Inf"} 4
apiserver_request_body_size_bytes_sum{resource="configwatchers.example.com",verb="create"} 2048
apiserver_request_body_size_bytes_count{resource="configwatchers.example.com",verb="create"} 4
apiserver_request_body_size_bytes_bucket{resource="configwatchers.example.com",verb="update",le="+Inf"} 4
apiserver_request_body_size_bytes_sum{resource="configwatchers.example.com",verb="update"} 1024
apiserver_request_body_size_bytes_count{resource="configwatchers.example.com",verb="update"} 4
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	w := apiWork(m)
	if w[workWatchEvents] != 42 || w[workWatchKiB] != 40 || w[workBodyKiB] != 3 {
		t.Errorf("work %v; want 42 watch events, 40 KiB sent, 3 KiB of request bodies", w)
	}
	for k := range w {
		if !isWork(k) {
			t.Errorf("%q is not told from a request", k)
		}
	}
}
