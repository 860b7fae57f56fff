// Package hub is the opzero hub: one always-on process per cluster that
// feeds every serverless operator in it, in place of one Knative
// ApiServerSource adapter per watched kind, the sweep PingSources and a
// wakeup source per operator. What an operator needs is a Subscription
// (opzero.dev/v1alpha1) that `opzero manifests --source=hub` writes.
//
// # Expected flow
//
// The hub watches Subscriptions. For each one it checks the spec (known
// kinds, selectors and schedules that parse), resolves the sink (a Knative
// Service's status.address.url, or a URI), and asks SubjectAccessReviews
// whether spec.serviceAccountName may itself get, list and watch every
// resource it subscribes to, as Knative's controller does for an
// ApiServerSource; the answers go into conditions (Valid, SinkResolved,
// Authorized, Ready), with an Event on each change. A Ready Subscription
// is attached to the hub's shared watches:
//
//   - one watch per distinct (resource, namespace, label selector, form),
//     however many Subscriptions need it; the form is metadata only
//     (PartialObjectMetadata) when every subscriber takes Reference mode,
//     the whole object when one takes Resource mode. Objects are streamed
//     to the subscribers and never stored.
//   - filters run before anything is sent: the owner filter (the controller
//     ownerReference's kind) and referencedBy (the object is named, in its
//     namespace, by a field of some object of the referrer kind: an index
//     of referrer -> name, the only state that grows, with the referrers).
//   - deliveries are Knative ApiServerSource events (types, extensions and
//     data as the adapter sends them), per Subscription up to
//     spec.delivery.concurrency at once, one at a time per object and mode
//     in watch order; a change that arrives while an earlier one of the
//     same object in the same mode waits replaces it (the operator
//     reconciles state, not history). An object subscribed in both modes
//     gets both events.
//     Failed sends are retried on the answers Knative's ApiServerSource
//     retries (transport errors, 404, 413, 425, 429, 502, 503, 504),
//     exponentially from spec.delivery.backoffDelay, Retry-After honoured,
//     spec.delivery.retry times (10); then, or on another 4xx, they go to
//     the dead-letter sink, else are dropped with a Warning Event. A 500 is
//     final and not dead-lettered: an opzero operator answers it when its
//     reconcile failed and it scheduled the retry itself.
//   - sweeps are PingSource ticks on spec.sweeps' cron schedules; wakeups
//     are the operator's Wakeup records (package wakeup's Source, one for
//     every operator, bounded window), sent to the Subscription's sink.
//
// # Guarantees
//
//   - No privilege through the hub: a Subscription whose service account
//     may not read what it asks for gets Authorized=False, an Event, and
//     nothing at all; the check is repeated when RBAC objects change.
//   - Progress per Subscription and watch is persisted in
//     status.progress: the resourceVersion up to which every change was
//     sent (or filtered out). After a restart the watch resumes from the
//     oldest progress of its subscribers; when the API server no longer has
//     that version (410 Gone), the hub lists and sends every object changed
//     since (as updates), and a sweep tick at once for deletions it cannot
//     see. Nothing waits for the periodic sweep. A change may be sent
//     twice (after a crash), never skipped.
//   - Bad input stays local: a Subscription naming an unknown kind, a sink
//     that does not resolve or a selector that does not parse gets a False
//     condition saying why and an Event; every other Subscription is served.
//
// # Caveats
//
//   - Memory grows with the Subscriptions, the distinct watches, the
//     referrers (referencedBy) and the objects with a send pending, not with
//     the objects in the cluster.
//   - One hub process serves a cluster; docs/hub.md says how it would shard.
package hub
