// Package activator plays Knative Serving's part for one operator on a
// laptop: it holds the operator's URL while no process runs, starts a
// process on the first request (buffering requests meanwhile), proxies to
// it, starts more instances under load (up to MaxScale) and stops each one
// (SIGTERM, so it drains) once it has been idle for the scale-to-zero period.
//
// # Guarantees
//
//   - A request that arrives while no instance is ready waits for one (up to
//     StartTimeout) instead of failing: nothing is lost during a cold start.
//   - An instance that is serving a request is never stopped for idleness.
//   - An instance that fails to start, or exits on its own, is forgotten; the
//     next request starts a fresh one. Requests waiting for a failed start
//     are answered 503 with Retry-After, which every Knative sender retries.
//   - Once Run has ended (it stops every instance), a request is answered
//     503 with Retry-After and starts nothing: no process outlives the
//     activator undrained.
//
// # Scaling (a simplification of Knative's autoscaler)
//
// Each instance takes up to Concurrency requests at once (Knative's
// containerConcurrency, or its autoscaling target). A request goes to the
// least-loaded ready instance below that bound (ties: the oldest, so extra
// instances drain and scale down), else to a starting one below it, else a
// new instance starts if fewer than MaxScale run; at MaxScale the request
// queues on the least-loaded instance. There is no stable/panic window: an
// instance is stopped after Idle with no request.
package activator
