// Package sourcecmd is the wakeup source's command line: its flags and what
// runs them. cmd/wakeup-source (the small binary the generated manifests
// deploy) and `opzero wakeup-source` (the CLI's subcommand) share it, so the
// two take the same flags and run the same code.
package sourcecmd

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opzero/opzero/internal/telemetry/otlpexport"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// Short is a one-line summary of the wakeup source.
const Short = "Deliver durable wakeups (RequeueAfter, retries) to serverless operators when they are due"

// Long describes the wakeup source for --help.
const Long = `The wakeup source is a small always-on process. It watches Wakeup records
(opzero.dev/v1alpha1, written by serverless operators when a reconcile returns
RequeueAfter or fails) and, at each one's due time, sends a dev.opzero.wakeup
CloudEvent to the record's sink, which starts the operator if it has scaled to
zero; after a 2xx answer it deletes the record. It fires overdue records when it
starts and backs off when a sink fails. It holds at most --window records in
memory, the earliest due, and lists the others by their due-time label
(opzero.dev/due-bucket) when their turn comes.

It needs get/list/watch/delete on wakeups.opzero.dev. With --audience it
authenticates like Knative's OIDC senders: a TokenRequest token of
--service-account for that audience.`

// Example shows the flags the generated manifests pass.
const Example = `--operator configwatcher --audience opzero:default:configwatcher --service-account default/configwatcher-wakeup-source --health-addr :8081`

// Flags are the wakeup source's settings.
type Flags struct {
	Namespace      string
	Operator       string
	Audience       string
	ServiceAccount string // <namespace>/<name>
	Concurrency    int
	Window         int
	PageSize       int
	PagedStart     bool
	HealthAddr     string
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.Namespace, "namespace", "", "watch only this namespace (default all namespaces)")
	fs.StringVar(&f.Operator, "operator", "", "deliver only the Wakeups of the operator with this name, or of these comma-separated ones (the controllers of one binary), by their label opzero.dev/operator (default every operator's, for one source per cluster)")
	fs.StringVar(&f.Audience, "audience", "", "send a bearer token for this audience (the operator's --audience)")
	fs.StringVar(&f.ServiceAccount, "service-account", "", "send tokens of this service account, given as namespace/name (with --audience)")
	fs.IntVar(&f.Concurrency, "concurrency", 16, "how many events may be being sent at once (delivered records waiting for their deletion: up to four times as many)")
	fs.IntVar(&f.Window, "window", wakesource.DefaultWindow, "how many Wakeups to hold in memory at most: the earliest due; the others are listed by due time when their turn comes")
	fs.IntVar(&f.PageSize, "page-size", 500, "how many Wakeups one list request returns")
	fs.BoolVar(&f.PagedStart, "paged-start", false, "read every Wakeup at start by paged lists, as on an API server without WatchList, instead of a watch's initial events")
	fs.StringVar(&f.HealthAddr, "health-addr", "", "serve /healthz (fails once the watch of Wakeups has been down for 2 minutes: a liveness probe), /readyz (the Wakeups have been listed) and /metrics (wakeups pending, fired, late) on this address, e.g. :8081; with OTEL_EXPORTER_OTLP_ENDPOINT set, the metrics are also pushed with OTLP (default not served)")
}

// Run connects to the API server (KUBECONFIG, else in-cluster) and delivers
// Wakeups until ctx ends. Logs go to stderr as JSON.
func (f Flags) Run(ctx context.Context) error {
	var sans, saname string
	if f.Audience != "" {
		var ok bool
		if sans, saname, ok = strings.Cut(f.ServiceAccount, "/"); !ok || sans == "" || saname == "" {
			return fmt.Errorf("--service-account %q: want <namespace>/<name> of the service account whose tokens carry --audience", f.ServiceAccount)
		}
	}
	if f.PageSize <= 0 {
		return fmt.Errorf("--page-size %d: want a positive number of Wakeups per list request (500 by default)", f.PageSize)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("no Kubernetes API server: set KUBECONFIG or run in a cluster: %w", err)
	}
	// No client-side rate limit, as controller-runtime's config (which the
	// source used before) has it: the API server's priority and fairness
	// limits instead. client-go's default, 5 per second, would hold back the
	// deletions of delivered records, and with them the deliveries.
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	o := wakesource.SourceOptions{Namespace: f.Namespace, Operator: f.Operator, Concurrency: f.Concurrency, Window: f.Window, PageSize: int64(f.PageSize), PagedStart: f.PagedStart, Log: log}
	if strings.Contains(f.Operator, ",") { // the controllers of one binary
		o.Operator, o.Operators = "", strings.Split(f.Operator, ",")
	}
	if f.Audience != "" {
		o.Token = wakesource.TokenRequester(dyn, sans, saname, f.Audience)
	}
	var src *wakesource.Source
	// Its own registry, with the Go and process collectors
	// controller-runtime's has: /metrics serves it, telemetry pushes it.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.Delivered = observeDeliveries(reg, func() int { return src.Pending() })
	src = wakesource.NewSource(wakesource.Dynamic(dyn), o)
	tp, err := otlpexport.Setup(ctx, otlpexport.Options{ServiceName: strings.TrimSuffix("wakeup-source-"+f.Operator, "-"), InstanceID: os.Getenv("POD_NAME"), Gatherer: reg})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}()
	if f.HealthAddr != "" {
		l, err := net.Listen("tcp", f.HealthAddr)
		if err != nil {
			return fmt.Errorf("--health-addr %s: %w (choose another address)", f.HealthAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", src.HealthHandler())
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	log.Info("wakeup source running", "namespace", f.Namespace, "operator", f.Operator, "authenticated", f.Audience != "", "health", f.HealthAddr, "pid", os.Getpid())
	return src.Run(ctx)
}

// observeDeliveries registers the wakeup source's metrics in reg and returns the
// Source's Delivered callback that feeds them: records pending (a gauge
// read from pending), fired, and how late each fired after its due time
// (late: more than a second).
func observeDeliveries(reg prometheus.Registerer, pending func() int) func(ns, name string, due, at time.Time) {
	fired := prometheus.NewCounter(prometheus.CounterOpts{Name: "opzero_wakeups_fired_total", Help: "Wakeups delivered with a 2xx answer"})
	late := prometheus.NewCounter(prometheus.CounterOpts{Name: "opzero_wakeups_late_total", Help: "Wakeups delivered more than a second after they were due"})
	lateness := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "opzero_wakeup_lateness_seconds",
		Help: "How long after its due time a Wakeup was delivered", Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "opzero_wakeups_pending", Help: "Wakeups held waiting to be delivered (at most the --window earliest)"},
		func() float64 { return float64(pending()) })
	for _, c := range []prometheus.Collector{fired, late, lateness, gauge} {
		reg.MustRegister(c)
	}
	return func(_, _ string, due, at time.Time) {
		fired.Inc()
		d := max(at.Sub(due), 0)
		lateness.Observe(d.Seconds())
		if d > time.Second {
			late.Inc()
		}
	}
}
