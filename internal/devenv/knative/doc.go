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
//     add events matter; Adapter.Synced is closed once every reflector has
//     listed (its "Caches populated" line, logged at K_KLOG_VERBOSITY 2).
//   - It looks its resources up in API discovery once, at start, and skips
//     one it cannot find without failing: StartApiServerSource first waits
//     until discovery lists every resource (a new CRD takes a moment).
//   - It always binds :8080 for a health probe (a second adapter cannot bind
//     it and says nothing) and :8008 for pprof unless PROFILING_PORT moves
//     it: never run the operator on 8080 next to it. Its /health fails only
//     after SIGTERM; Adapter.Probe reads the adapter's metrics endpoint
//     instead, a port per adapter (health.go says what each signal shows).
//   - After a watch ends with an error the adapter lists again after a
//     backoff (up to a minute) and sends nothing for what it lists: changes
//     made in between are lost. Adapter.Gap reports it from the log.
//   - Sends are synchronous: while one event is retried (100 ms ... 1.6 s on
//     404, 413, 425, 429, 502, 503, 504 and transport errors), later events
//     wait; after 5 retries an event is dropped.
package knative
