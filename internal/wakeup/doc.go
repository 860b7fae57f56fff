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
//     its due time, in due order.
//   - Its memory is bounded, not proportional to the records pending: it
//     holds a small entry for at most SourceOptions.Window of them, the
//     earliest due (window.go). The Store labels every record with its due
//     second (DueBucketLabel); the source lists the next seconds by that
//     label when the window runs low or the clock nears its end, and
//     watches every record to follow changes inside it.
//
// # Caveats
//
//   - A record without a valid due label (written before the label
//     existed, or by hand) is a stray: the source holds it whatever its due
//     time, so strays are not bounded. The Store labels a record whenever it
//     writes it.
//   - Records due within the same second are listed together: when one
//     second holds more than a window of them, that second is listed again
//     for each window delivered.
//   - On start, and when its watch cannot resume, the source reads every
//     record once, and delivers nothing until it has (then the earliest
//     due first). It reads them as the initial events of its watch
//     (sendInitialEvents, WatchList: on by default in kube-apiserver 1.32
//     and 1.34+): one pass over the API server's watch cache, streamed, one
//     event in memory. An API server that refuses initial events (1.27 to
//     1.31 and 1.33 unless the WatchList gate is on) gets paged lists
//     instead (SourceOptions.PagedStart forces them), and each page costs
//     it a pass over the records after it: that start grows with the
//     square of the records pending (keep.go). API servers before 1.27
//     ignore sendInitialEvents and are not supported.
//   - Deliveries are in due order among held records; while a backlog
//     fills the window, a stray may be delivered before an earlier record
//     not yet read.
package wakeup
