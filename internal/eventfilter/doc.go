// Package eventfilter is Knative Trigger filtering, for opzero's external
// events: the one matching code that the serverless engine, the classic
// engine's event endpoint and `opzero dev`'s Broker use, so that an event
// reaches the operator in development exactly when it would on Knative.
//
// Spec is a Trigger's spec.filter.attributes and spec.filters; Filter is one
// entry of spec.filters (Knative's SubscriptionsAPIFilter, same JSON).
//
// # Guarantees
//
//   - Knative Eventing v0.50's semantics, rule for rule
//     (pkg/eventfilter/attributes and pkg/eventfilter/subscriptionsapi):
//     attributes match exactly, "" meaning any non-empty value; exact,
//     prefix and suffix compare the attribute's string form,
//     case-sensitive; all, any and not combine with Knative's three-valued
//     result (an empty all or any decides nothing, which lets the event
//     pass); when Filters is set, Attributes is ignored, as Knative's
//     broker filter does.
//   - Validate rejects what Knative's Trigger webhook rejects (attribute
//     names outside ^[a-z][a-z0-9]*$, two dialects in one filter) and what
//     Knative's filter code would silently skip (empty names or values, a
//     filter with no dialect), so that a filter never quietly matches
//     everything.
//
// # Caveats
//
// The cesql dialect is not supported: Validate rejects it. The code is a
// port, not a link: Knative's filter packages pull in knative.dev/pkg,
// zap and the eventing API types, which an operator binary must not carry.
package eventfilter
