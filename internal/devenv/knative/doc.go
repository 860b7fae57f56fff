// Package knative plays the parts of Knative that opzero needs on a laptop:
// it finds Knative's real CRDs and runs Knative's real ApiServerSource
// receive adapter and PingSource adapter as local processes, both in the
// versions opzero pins (knative.dev/eventing v0.50.0), found or built by
// package pinned.
//
// # Caveats (Knative eventing v0.50.0, see docs/knative-adapters.md)
//
//   - The adapter sends nothing for objects that exist when it starts, nor on
//     a relist: only watch events. Start it before creating objects whose
//     add events matter; Started waits for its "STARTING" log line, after
//     which its reflectors list and watch within tens of milliseconds.
//   - It looks its resources up in API discovery once, at start, and skips
//     one it cannot find without failing: StartApiServerSource first waits
//     until discovery lists every resource (a new CRD takes a moment).
//   - It always binds :8080 for a health probe (a clash with a second adapter
//     is logged, not fatal) and :8008 for pprof unless PROFILING_PORT moves
//     it: never run the operator on 8080 next to it.
//   - Sends are synchronous: while one event is retried (100 ms ... 1.6 s on
//     404, 413, 425, 429, 502, 503, 504 and transport errors), later events
//     wait; after 5 retries an event is dropped.
package knative
