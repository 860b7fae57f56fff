package telemetry

import (
	"github.com/opzero/opzero/internal/telemetry/otlpexport"

	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics are the serverless engine's Prometheus collectors, registered in
// controller-runtime's registry (crmetrics.Registry), so that /metrics and
// the OTLP push show them beside client-go's. The controller_runtime_* and
// workqueue_* ones have controller-runtime's names, labels, help and
// buckets: a binary that also links classic mode has them registered
// already, and shares them.
type Metrics struct {
	ReconcileTotal  *prometheus.CounterVec   // controller, result: success, error, requeue, requeue_after
	ReconcileErrors *prometheus.CounterVec   // controller
	TerminalErrors  *prometheus.CounterVec   // controller
	ReconcilePanics *prometheus.CounterVec   // controller
	ReconcileTime   *prometheus.HistogramVec // controller
	ActiveWorkers   *prometheus.GaugeVec     // controller
	WorkerCount     *prometheus.GaugeVec     // controller

	QueueDepth     *prometheus.GaugeVec     // name, controller, priority
	QueueAdds      *prometheus.CounterVec   // name, controller
	QueueLatency   *prometheus.HistogramVec // name, controller
	QueueWork      *prometheus.HistogramVec // name, controller
	QueueRetries   *prometheus.CounterVec   // name, controller
	Events         *prometheus.CounterVec   // controller, reason, code
	Skipped        *prometheus.CounterVec   // controller
	HandOffs       *prometheus.CounterVec   // controller
	Forwards       *prometheus.CounterVec   // controller, result
	ColdStarts     *prometheus.CounterVec   // controller
	FirstReconcile *prometheus.GaugeVec     // controller
	APIWrites      *prometheus.CounterVec   // kind: lease, wakeup, other; verb; code
}

var (
	metricsOnce sync.Once
	metrics     *Metrics
)

// processStart is when this process's telemetry was initialized: close
// enough to exec for a cold start's time to first reconcile.
var processStart = otlpexport.ProcessStart

// reconcileBuckets are controller-runtime's for reconcile time.
var reconcileBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
	1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60}

// Default returns the collectors, registering them the first time.
func Default() *Metrics {
	metricsOnce.Do(func() { metrics = newMetrics(crmetrics.Registry) })
	return metrics
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	native := func(o prometheus.HistogramOpts) prometheus.HistogramOpts {
		o.NativeHistogramBucketFactor, o.NativeHistogramMaxBucketNumber, o.NativeHistogramMinResetDuration = 1.1, 100, time.Hour
		return o
	}
	ctrl := []string{"controller"}
	queue := []string{"name", "controller"}
	return &Metrics{
		ReconcileTotal: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_reconcile_total",
			Help: "Total number of reconciliations per controller"}, []string{"controller", "result"})),
		ReconcileErrors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_reconcile_errors_total",
			Help: "Total number of reconciliation errors per controller"}, ctrl)),
		TerminalErrors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_terminal_reconcile_errors_total",
			Help: "Total number of terminal reconciliation errors per controller"}, ctrl)),
		ReconcilePanics: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_reconcile_panics_total",
			Help: "Total number of reconciliation panics per controller"}, ctrl)),
		ReconcileTime: register(reg, prometheus.NewHistogramVec(native(prometheus.HistogramOpts{Name: "controller_runtime_reconcile_time_seconds",
			Help: "Length of time per reconciliation per controller", Buckets: reconcileBuckets}), ctrl)),
		ActiveWorkers: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "controller_runtime_active_workers",
			Help: "Number of currently used workers per controller"}, ctrl)),
		WorkerCount: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "controller_runtime_max_concurrent_reconciles",
			Help: "Maximum number of concurrent reconciles per controller"}, ctrl)),
		QueueDepth: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth",
			Help: "Current depth of workqueue by workqueue and priority"}, []string{"name", "controller", "priority"})),
		QueueAdds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total",
			Help: "Total number of adds handled by workqueue"}, queue)),
		QueueLatency: register(reg, prometheus.NewHistogramVec(native(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "How long in seconds an item stays in workqueue before being requested", Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}), queue)),
		QueueWork: register(reg, prometheus.NewHistogramVec(native(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "How long in seconds processing an item from workqueue takes.", Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}), queue)),
		QueueRetries: registerRetries(reg, queue),
		Events: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opzero_events_total",
			Help: "Deliveries (CloudEvents) per controller, by wake reason (create, update, delete, sweep, full_sweep, ping, wakeup, external) and HTTP code"},
			[]string{"controller", "reason", "code"})),
		Skipped: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opzero_skipped_events_total",
			Help: "Update events acknowledged with no reconcile: their generation was already observed"}, ctrl)),
		HandOffs: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opzero_handoffs_total",
			Help: "Keys left to the instance holding their Lease"}, ctrl)),
		Forwards: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opzero_forwarded_events_total",
			Help: "Events sent on to the instance holding their key's Lease, by result: forwarded (the holder answered), fallback (it could not be reached or did not take the event; the Lease was marked instead)"},
			[]string{"controller", "result"})),
		ColdStarts: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opzero_cold_starts_total",
			Help: "First deliveries of a process: 1 per instance started"}, ctrl)),
		FirstReconcile: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opzero_cold_start_first_reconcile_seconds",
			Help: "Seconds from the process's start to the end of its first reconcile"}, ctrl)),
		APIWrites: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opzero_api_writes_total",
			Help: "Writes to the API server by kind (lease: per-key Leases; wakeup: durable time; other), verb and HTTP code"},
			[]string{"kind", "verb", "code"})),
	}
}

// retriesHelp is controller-runtime's help of workqueue_retries_total:
// the newer first, then the one before v0.24. The registry refuses a name
// registered twice with two helps, so the counter is registered with the
// one the linked controller-runtime registered, if it did.
var retriesHelp = []string{
	"Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
	"Total number of retries handled by workqueue",
}

func registerRetries(reg prometheus.Registerer, labels []string) *prometheus.CounterVec {
	var err error
	for _, help := range retriesHelp {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total", Help: help}, labels)
		if err = reg.Register(c); err == nil {
			return c
		}
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if have, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return have
			}
		}
	}
	panic("telemetry: " + err.Error())
}

// register registers c, or returns the collector registered before under
// the same description (controller-runtime's, or an earlier engine's).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if have, ok := are.ExistingCollector.(C); ok {
				return have
			}
		}
		panic("telemetry: " + err.Error()) // the descriptions above are fixed: a mismatch is a build mistake
	}
	return c
}
