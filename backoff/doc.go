// Package backoff computes retry delays and keeps one pending timer per key.
//
// # Guarantees
//
//   - Policy.Delay grows Base * Factor^attempt, never above Cap, never
//     overflowing; Jitter only shortens a delay (by up to that fraction).
//   - Tracker keeps at most one timer per key and the earliest due time
//     wins: a later request never postpones an earlier one.
//   - Success forgets a key's failures and cancels its pending timer: a
//     later success cancels a pending retry.
//   - Memory is bounded by the keys with failures or timers.
//
// The clock is injected; tests step a FakeClock instead of sleeping.
package backoff
