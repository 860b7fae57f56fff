// Package broker plays a Knative Broker and its Triggers for `opzero dev`:
// an ingress that takes CloudEvents and answers 202, Knative's Trigger
// filters, and delivery with Knative's retries, backoff and dead-letter
// sink. Like Knative's in-memory channel, an accepted event lives only in
// this process's memory until it is delivered.
//
// # Expected flow
//
// The platform (package dev) reads the Brokers and Triggers back from the
// API server, resolves each Trigger's subscriber and dead-letter sink to
// local URLs, and calls Ingress.Set for each Broker. A POST to
// /<namespace>/<broker> (the Broker's status.address.url) is decoded
// (binary or structured CloudEvent; anything else is 400 and goes nowhere),
// stamped with Knative's knativearrivaltime extension, answered 202, and
// then sent to every Trigger of that Broker whose filter it passes, each in
// its own goroutine.
//
// # Guarantees
//
//   - Filters: package eventfilter, Knative Eventing v0.50's semantics
//     (spec.filter.attributes; spec.filters with exact, prefix, suffix,
//     all, any, not; filters win over attributes when both are set).
//   - Delivery as Knative's dispatcher (pkg/kncloudevents): binary mode,
//     with the Trigger's OIDC token for the subscriber's audience when it
//     has one. A 2xx is delivered, once. No answer, 5xx, 404, 408, 409 and
//     429 are retried up to delivery.retry times, other answers are not.
//     Retry n (1, 2, ...) waits backoffDelay*2^(n-1) (exponential) or
//     backoffDelay*(n-1) (linear: the first retry is immediate), as
//     Knative computes it (its retry library counts from 0); no policy or
//     no delay: no wait.
//   - After the last failed attempt the event goes to the dead-letter sink
//     (with the same retries) with Knative's extensions: knativeerrordest
//     (the subscriber's URL), knativeerrorcode (its last HTTP status, 500
//     when it did not answer) and knativeerrordata (its answer's body,
//     base64, at most 1024 characters). Without a dead-letter sink the
//     event is dropped, and logged.
//
// # Caveats
//
//   - In memory: events accepted but not yet delivered are lost when
//     opzero dev stops, as with Knative's in-memory channel.
//   - The ingress does not check tokens (Knative's does when OIDC is on):
//     it listens on 127.0.0.1 only.
//   - Replies (an event in a 2xx answer's body) are not sent back into the
//     Broker; delivery.timeout, retryAfterMax and format are not played.
package broker
