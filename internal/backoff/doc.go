// Package backoff computes per-key retry delays and keeps one pending retry
// timer per key. It uses the standard library only; the clock is injected so
// that tests step a FakeClock instead of sleeping.
//
// # Expected flow
//
// A runtime makes one Tracker with a Policy, a Clock and a fire function
// that resubmits a key. After each reconcile of a key it does one of:
//
//   - Success(key) when the reconcile succeeded: the failure count is
//     forgotten and any pending retry is cancelled.
//   - Success(key) then After(key, d) for a success with RequeueAfter d.
//   - Failure(key) when it failed: the count grows and fire(key) is
//     scheduled after Policy.Delay(failures before this one); a failure
//     while a retry is pending (an event's reconcile before the retry was
//     due) leaves both as they are, so that the backoff grows by the
//     retries' failures, not by the echoes of the failed reconcile's
//     writes.
//
// # Guarantees
//
//   - Policy.Delay(0) is Base; each attempt multiplies it by Factor, never
//     above Cap and never overflowing, whatever the attempt. Jitter only
//     shortens a delay, by at most that fraction, so Cap still holds.
//   - At most one timer per key, and the earliest due time wins: Failure or
//     After never postpones a timer that is due earlier.
//   - Success cancels the key's pending timer: fire is not called for it,
//     unless the timer had already begun firing.
//   - fire is called without the Tracker's lock held, from the clock's
//     goroutine (inside Step for a FakeClock).
//   - Memory is bounded by the keys with failures or timers: Success removes
//     a key entirely, and a timer's entry is dropped when it fires.
//
// # Caveats
//
//   - A key's failure count survives its timer firing and lasts until
//     Success: a key that fails and is never reconciled successfully again
//     (deleted, say) keeps one counter. Call Success to forget it.
//   - A Success racing a timer that is already firing cannot stop it: fire
//     may be called once more. Reconciles are idempotent; one extra run is
//     harmless.
//   - Timers live in memory. A process that stops (a pod scaled to zero)
//     loses its pending retries.
//   - Delay reads a Policy with zero fields filled from DefaultPolicy: the
//     zero Policy is DefaultPolicy, not "no delay".
package backoff
