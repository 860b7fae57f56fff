// Package serverless runs an operator (builder.Controller) as an HTTP
// CloudEvents receiver: the shape a Knative Service that scales to zero
// needs. Events come from Knative ApiServerSource (Resource and Reference
// mode) for the primary, owned and watched kinds, and from PingSource.
//
// # Expected flow
//
// A request is decoded (binary or structured CloudEvent), routed to the keys
// it concerns (the object itself, its controller owner, or what the map
// function returns), filtered, and, for updates of the primary kind,
// checked for generation-aware skipping. Each key is submitted to a per-key
// queue; the request is answered when a reconcile of every key that started
// after the request arrived has finished.
//
// # Guarantees
//
//   - Never two reconciles of one key at once in this process; events that
//     arrive while a key reconciles fold into one follow-up reconcile, held
//     until the key's events pause for Options.FollowUpSettle (2 ms; at most
//     FollowUpMaxSettle, 20 ms, after the reconcile before it ended), so a
//     burst that outlasts a reconcile costs one follow-up, not one per
//     reconcile it spans; distinct keys run in parallel up to
//     Options.MaxConcurrentReconciles.
//   - Across instances (Options.Locker, set when --max-scale > 1): never two
//     reconciles of one key at once anywhere. A run first takes the key's
//     coordination.k8s.io Lease (package lease: a create, and a delete when
//     it ends). An instance that gets an event for a key another live
//     instance holds marks the Lease dirty and answers 200 "handed off": the
//     holder reconciles once more before releasing. If the holder dies, the
//     marking instance looks again at the Lease's expiry (in-process, and
//     as an Accepted Wakeup when durable time is on, so scaling to zero
//     loses nothing) and takes it over; a sweep reconciles every key whose
//     Lease expired.
//   - A 2xx answer means handled: reconciled, deliberately skipped, or
//     handed off to the instance holding the key's Lease.
//   - A skipped update costs no reconcile and no API call.
//   - No cache. The reconciler's client reads from the API server, except
//     that in Resource mode the reconcile's first Get of its own key is
//     answered from the newest object that arrived in an event for that key
//     since the previous reconcile started. That object is exactly what an
//     informer would have delivered at that moment, and the reconcile starts
//     after it arrived, so it is never staler than an informer cache could
//     serve; every later read goes to the API server.
//
// # HTTP answers
//
// Knative's senders retry some codes and not others
// (docs/knative-events.md), so each code is chosen for what the sender
// should do:
//
//	200  handled (reconciled, skipped, filtered, nothing to do); empty body, so
//	     a Broker does not take it for a malformed reply; the reason is in the
//	     Opzero-Result header
//	202  async mode (Options.Async): the event is durably recorded and will be
//	     reconciled after the answer
//	400  malformed or unroutable event: never retried; the body names the problem
//	422  the reconcile returned a reconcile.TerminalError: retrying cannot help
//	     (no sender retries 422; a Broker dead-letters it)
//	500  the reconcile failed; a retry with backoff is scheduled in this
//	     process. ApiServerSource does not retry 500 (no duplicate storm);
//	     a Broker does, which the per-key queue coalesces
//	413  the event is larger than Options.MaxBodyBytes
//	429  more than Options.MaxInFlight requests at once (Retry-After is set)
//	503  shutting down, the key's wait exceeded Options.MaxWait, or the API
//	     server could not be read while routing, or a reconcile failed because
//	     the API server could not be reached or was overloaded (connection
//	     refused or reset, network timeout, 429, 503, 504; a retry is
//	     scheduled in this process too): every sender retries (Retry-After is
//	     set)
//
// # Caveats
//
// Retries and RequeueAfter are in-process timers here: they die with the
// instance. Reference-mode events for owned kinds cost a GET to find the
// owner; a deleted dependent in Reference mode cannot be mapped (use
// Resource mode for owned kinds).
package serverless
