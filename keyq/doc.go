// Package keyq serializes and coalesces work per key. It is the heart of the
// serverless engine: an HTTP request carrying an event for a key is answered
// only after a run of that key that started after the request arrived has
// finished, so a 2xx means "handled".
//
// # Expected flow
//
// Submit(key, payload) returns a Ticket. If the key is idle, a run is
// queued (it starts when one of MaxConcurrent slots is free). If a run of
// the key is queued but not started, the submission joins it. If a run is
// in progress, the submission joins the key's single pending follow-up run,
// which starts when the current one ends. A Ticket completes with the error
// of the run it joined.
//
// # Guarantees
//
//   - Never two runs of one key at once.
//   - Any number of submissions during a run fold into one follow-up run.
//   - A ticket's run started after its Submit; payloads reach that run's
//     RunFunc in arrival order, exactly once.
//   - At most MaxConcurrent keys run at once.
//   - Memory is bounded by the keys with work: an idle key holds nothing.
//   - A panic in RunFunc becomes the run's error; the key is not wedged.
//
// # Caveats
//
// Queued keys wait in FIFO order for a slot; a run holds its slot for its
// whole duration. Shutdown cancels runs that have not started.
package keyq
