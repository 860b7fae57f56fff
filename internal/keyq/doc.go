// Package keyq serializes and coalesces work per key. It is the heart of the
// serverless engine: an HTTP request carrying an event for a key is answered
// only after a run of that key that started after the request arrived has
// finished, so a 2xx means "handled".
//
// # Expected flow
//
// Submit(key, payload) returns a Ticket and never blocks.
//
//   - If key is idle, a run of key is queued; it starts as soon as one of
//     Options.MaxConcurrent slots is free (at once if one is).
//   - If a run of key is queued but has not started, the submission joins it.
//   - If a run of key is in progress, the submission joins the key's single
//     pending follow-up run (created if absent). When the run in progress
//     ends, the follow-up queues behind the keys already waiting for a slot.
//   - With Options.Settle, a follow-up is held first, until the key's
//     submissions have paused for Settle (at most Options.MaxSettle after
//     the run before it ended); submissions meanwhile join it. A burst
//     still arriving when a run ends then costs one follow-up, not one per
//     run it spans.
//
// The RunFunc receives the payloads of every submission its run serves, and
// each of those tickets completes with the run's error. Ticket.Wait lets a
// caller give up waiting (the run still happens). A RunFunc that waits for
// something after it has started can Claim its key's pending follow-up: the
// submissions since it started join the run in progress instead.
//
// Shutdown stops accepting submissions, completes the tickets of every run
// that has not started with ErrShutdown, and waits for the runs in progress.
// If its context ends first it cancels the runs' context and returns.
// Drain stops accepting submissions too, but first lets every run already
// submitted happen (queued, held and pending follow-ups), then shuts down:
// for callers that answered before the run (the serverless engine's
// answering at admission).
//
// # Guarantees
//
//   - Never two runs of one key at once.
//   - Any number of submissions during a run fold into exactly one
//     follow-up run (with Settle, so do those until the key's submissions
//     pause, up to MaxSettle after the run ends).
//   - A ticket completes with the error of a run that started after its
//     Submit, or that claimed it (Claim) after its Submit (or with
//     ErrShutdown if that run never starts).
//   - Every payload reaches exactly one run, in arrival order per key.
//   - At most MaxConcurrent keys run at once; waiting keys get a slot first
//     come, first served, so a busy key cannot starve the others.
//   - A panic in the RunFunc becomes the run's error (*PanicError); the key
//     is not wedged and the process does not crash. A RunFunc that calls
//     runtime.Goexit gets an error too.
//   - Memory is bounded by the keys with work: an idle key holds nothing,
//     and an idle queue has Len() == 0.
//   - When a ticket is done, its run no longer counts in Running or Len.
//
// # Caveats
//
//   - A run holds its slot for its whole duration: MaxConcurrent slow keys
//     delay every other key.
//   - A follow-up accumulates one payload and one ticket per submission
//     while its key runs: a hot key with a slow run holds memory in
//     proportion to its waiting submitters.
//   - Runs' contexts derive from Options.Context; the queue cancels them only
//     when Shutdown's context ends before the runs do. A RunFunc that ignores
//     its context outlives that deadline: Shutdown returns, the run goes on.
//   - A ticket whose waiter gave up is still served: abandoning a ticket
//     does not cancel or skip a run.
//   - Settle trades latency for fewer runs: a submission that arrives while
//     its key runs waits up to Settle longer than it would have (never more
//     than MaxSettle after that run ends); a first run is never held.
package keyq
