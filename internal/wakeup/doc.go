// Package wakeup is durable time for serverless operators: RequeueAfter and
// retry backoff that survive scale to zero. Knative has no delayed delivery,
// and in-process timers die with the instance.
//
// # Expected flow
//
// When a reconcile returns RequeueAfter, or fails, the serverless engine
// records a Wakeup (opzero.dev/v1alpha1) for the key through a Store before
// it answers. The wakeup source (Source, `opzero wakeup-source`), a small
// always-on process, watches Wakeups and at each one's due time sends a
// `dev.opzero.wakeup` CloudEvent to its sink, starting the operator if it was
// scaled to zero, then deletes the record, unless the record changed
// meanwhile (a new RequeueAfter): the delete carries the delivered
// resourceVersion as a precondition.
//
// # Guarantees
//
//   - One record per operator and key (its name is derived from both), never
//     duplicated; the earliest due time wins.
//   - The failure count lives in the record, so the backoff continues across
//     instances and restarts.
//   - A successful reconcile deletes a pending retry; a RequeueAfter record
//     stays until it fires.
//   - The wakeup source fires what is overdue when it starts, nothing before
//     its due time, and keeps only a small entry per pending record.
package wakeup
