// Package hub is the opzero hub: one always-on process per cluster that
// feeds every serverless operator in it, in place of one Knative
// ApiServerSource adapter per watched kind, the sweep PingSources and a
// wakeup source per operator. What an operator needs is a Subscription
// (opzero.dev/v1alpha1), which `opzero manifests` writes by default.
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
//   - early delivery (package starting): a send to a Knative Service that
//     is not answered within 100 ms (the activator holds it while a pod
//     starts) is also posted, same event, token and epoch, to the user
//     container of a pod of that Service that is starting, dialed every
//     20 ms until it listens; the first answer that settles the send
//     counts and the other request is cancelled. The pods' addresses come
//     from their own announcements (POST /v1/starting on --health-addr,
//     with a token of the Service's service account for audience
//     opzero-hub; used 5 s at most and only until a pod is ready) and from
//     the Service's private EndpointSlices. Not when a pod of the Service
//     is ready (the route serves it); --early-delivery=false turns it off.
//   - a sink that is a Deployment (apps/v1) is an unchanged operator
//     (target.go): a change let through is "sent" by scaling the
//     Deployment's own spec.replicas from 0 to 1 (settled once written: the
//     operator's initial list sees it), and the Deployment goes back to 0
//     after spec.scaleToZero.idleAfter with nothing let through, nothing
//     pending and its workqueue metrics at 0; the changes this scaling
//     makes (every Deployment sink's Deployment, ReplicaSets and pods)
//     are delivered to no Subscription; a
//     leader-election Lease of a gone pod of it is released before a wake.
//   - sweeps are PingSource ticks on spec.sweeps' cron schedules; wakeups
//     are the operator's Wakeup records (package wakeup's Source, one for
//     every operator, bounded window), sent to the Subscription's sink.
//
// Replicas (Options.LeaseNamespace; two by default in the manifests) share
// the Subscriptions: each hashes by namespace/name into one of
// Options.Buckets buckets, and bucket i is held by the replica holding the
// Lease opzero-hub-bucket-<i> (package bucket: acquired, renewed every 2 s,
// expiring after 10 s unrenewed, released on stop). Every replica watches
// every Subscription (a small list), and serves — checks, watches, sends,
// sweeps, status — only those of the buckets it holds; an operator's
// Wakeups go with the bucket of its first Subscription that takes them.
//
//   - A bucket won is served from the progress in its Subscriptions'
//     status, read again by a quorum list once the Lease is held.
//   - A bucket lost (its Lease not renewed for 7 s, or naming another
//     holder) stops its Subscriptions at once, writing nothing.
//   - On stop (SIGTERM: a rolling update), the replica stops its watches,
//     lets the sends under way settle (Options.Drain, 5 s; what is queued
//     is left for the next holder), writes the progress and releases its
//     Leases: the other replica takes them at its next try (2 s).
//   - A replica killed (SIGKILL) loses its buckets when their Leases
//     expire: the other takes them 10 to 14 s after the last renewal, and
//     resumes from the progress last written (every Options.Flush, 2 s).
//     A container restarted in its pod takes its own Leases back at once
//     (its identity is the pod name).
//
// # Files, in the order a change travels
//
//	hub.go         Run; watchSubscriptions: every Subscription, as a sub
//	               (subscription.go); update, wire: attached to watches
//	replicas.go    which buckets this replica serves (package bucket),
//	               hand-offs, whose Wakeups go where
//	check.go       check: the spec, the sink (resolve), kinds (api.go:
//	               discovery of those group-versions only), authorize
//	               (SubjectAccessReviews); plan: the spec as attachments
//	watch.go       sharedWatch: one watch per watchKey, streamed (raw.go
//	               decodes without a scheme), relisted after 410 Gone;
//	               dispatch: each attachment that wants (owner filter;
//	               referencedBy through refindex.go) and does not skip
//	               (skipObserved) the change
//	refindex.go    the referrer index of a referencedBy; tell: an object
//	               that became referenced is sent once
//	deliver.go     dispatcher: one pending change per object and mode,
//	               spec.delivery.concurrency sends; sub.send: the
//	               ApiServerSource CloudEvent, the hub's token, retries,
//	               dead letter; settled
//	epoch.go       the Opzero-Hub-Epoch header of every send
//	early.go       postSink: the route, and the starting pod (package
//	               starting) as soon as it listens
//	sweep.go       the sweeps' cron ticks; when the anti-entropy sweep is
//	               skipped (unvouch)
//	target.go      a Deployment sink (an unchanged operator): scaled from
//	               0 to 1 for a change, back to 0 when idle
//	targetadmission.go  an admission call for a Deployment sink: its
//	               running pods (package admission calls ServingPods)
//	watch.go       attachment.pass, mark.done: progress past each settled
//	               change; subscription.go: setProgress, writeStatus and
//	               flush (status.progress, every Options.Flush)
//	stats.go       the opzero_hub_* metrics; health.go /healthz, /readyz
//
// A Subscription's methods (type sub) live in subscription.go (state,
// progress, status), deliver.go (send), early.go (postSink), sweep.go
// (ticks) and targetadmission.go; docs/flow.md draws the whole path, the
// operator's side included.
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
//     A bucket Lease edited by hand (its holder set to a name no replica
//     has, or deleted) is logged; the garbage holder's bucket is taken
//     back once it has not renewed it for 10 s (its Subscriptions resume
//     from their progress), a deleted Lease is written again by its holder,
//     and the other buckets are served throughout.
//   - One writer per status: a Subscription's status (progress,
//     conditions) is written only by the replica that holds its bucket,
//     checked before each write; a holder gives a bucket up (7 s without a
//     renewal) before another may take it (10 s).
//   - Nothing is lost around a hand-off, and duplicates are bounded and
//     counted: the new holder starts from the progress written by the old
//     one, so a change may be sent by both; opzero_hub_handoff_replayed_total
//     (Stats.Replayed) counts the events a replica sent of changes the
//     bucket's previous holders may have sent, an upper bound of those
//     duplicates: up to the newest change the releasing holder had posted
//     (it writes it on the Lease, bucket.HandoffAnnotation) after a
//     graceful hand-off, up to the moment the bucket was won after an
//     expiry (which counts the changes nobody sent while it was dead too).
//     A spec edit that changes a Subscription's filters (owner,
//     referencedBy, mode) starts from its progress again: what was sent
//     under the old spec since is sent again, counted and marked the
//     same way (the old spec's attachments take no change once the new
//     ones have read what they were handed). Each of those events
//     carries cloudevent.ReplayExtension "true": the operator does not let its object stand in for a read
//     (it may be older than what it already reconciled, even from before
//     a deletion). A watch gone back to an older progress (a Subscription
//     joining it) does not send its other subscribers what they were
//     handed already, and hands the joiner nothing (no change, no
//     bookmark, no relist) before it has gone back to it.
//   - Two versions side by side (a rolling update, two installs): each
//     Lease carries its holder's version and bucket count; a replica logs,
//     once per holder, a bucket held by another version
//     (opzero_hub_buckets_other_version) or counted differently.
//
// # Caveats
//
//   - Memory grows with the Subscriptions, the distinct watches, the
//     referrers (referencedBy) and the objects with a send pending, not with
//     the objects in the cluster.
//   - Buckets are not balanced: the replica that starts first takes every
//     free bucket, and the other is a standby until a hand-off; two full
//     standbys that start together split them by chance. A replica that serves no
//     Subscription keeps nothing open for them (no watch of their kinds
//     nor of RBAC objects): its Leases, the watch of Subscriptions and,
//     with --webhook-addr, the admission endpoint. A light standby
//     (Options.LightStandby, the binary's default) keeps less: it only reads the Leases (bucket.Elector.Wait) until it
//     takes bucket 0, then starts as any replica does, as fast as a full
//     standby would take the buckets over; two started together end as
//     one serving and one standing by. Replicas
//     give capacity to survive a death, not to serve more than one process
//     can (docs/hub.md).
//   - A SIGKILLed replica's Subscriptions get nothing for 10 to 14 s (the
//     Lease expiry, the other's retry), then what changed meanwhile.
//   - Every replica must run with the same --buckets; one that finds a
//     Lease written with another count says so, but does not stop.
package hub
