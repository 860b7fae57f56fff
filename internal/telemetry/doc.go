// Package telemetry is what an opzero operator tells about its work:
// metrics, one log line per delivery, traces, and their OTLP export.
//
// # Metrics
//
// In controller-runtime's Prometheus registry (crmetrics.Registry), so that
// they sit beside client-go's and a user's own:
//
//   - controller-runtime's, with its names, labels, help and buckets:
//     controller_runtime_reconcile_total{controller,result},
//     controller_runtime_reconcile_errors_total,
//     controller_runtime_terminal_reconcile_errors_total,
//     controller_runtime_reconcile_time_seconds,
//     controller_runtime_active_workers,
//     controller_runtime_max_concurrent_reconciles, and workqueue_depth,
//     workqueue_adds_total, workqueue_queue_duration_seconds (queue wait),
//     workqueue_work_duration_seconds, workqueue_retries_total;
//   - opzero's: opzero_events_total{controller,reason,code},
//     opzero_skipped_events_total, opzero_handoffs_total,
//     opzero_forwarded_events_total,
//     opzero_cold_starts_total (1 per instance),
//     opzero_cold_start_first_reconcile_seconds,
//     opzero_api_writes_total{kind=lease|wakeup|other,verb,code}.
//
// # Deliveries and traces
//
// The serverless engine calls an Observer: Intake when a request arrives
// (the W3C trace context of its traceparent header or CloudEvent extension,
// else a new trace), Event and Routed once it is decoded, Queued per key,
// Reconcile and Run.End around each reconcile, Delivery.End after the
// answer: one info line "delivery" (event id, type, source, wake reason,
// keys, cold start, HTTP code, reconciles and their time, trace ID) and
// the answer headers WakeReasonHeader, ColdStartHeader, ReconcilesHeader,
// TraceHeader. Spans: intake, then queue wait and reconcile as its
// children, then each API call (WrapTransport) as the reconcile's child.
// The reconcile's logger carries traceID, spanID and eventID.
//
// # Export
//
// Setup reads the standard OTEL_* variables: with an OTLP endpoint set
// (OTEL_EXPORTER_OTLP_ENDPOINT or the signals' own), spans are batched and
// metrics pushed every OTEL_METRIC_EXPORT_INTERVAL over OTLP/HTTP
// (http/protobuf), and Shutdown, called on drain, pushes what is left:
// an instance that scales to zero loses nothing. Without an endpoint
// nothing is allocated and the spans are the global no-op provider's (a
// traceparent that arrived still names the trace in the log line).
//
// # Caveats
//
// OTLP over gRPC is refused with a message (it would link gRPC: several
// MB of binary and RSS for every operator). The metrics are process-wide:
// two engines in one process (tests) share the collectors.
package telemetry
