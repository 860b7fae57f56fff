// Package serverless runs an operator (builder.Controller) as an HTTP
// CloudEvents receiver: the shape a Knative Service that scales to zero
// needs. Events come from Knative ApiServerSource (Resource and Reference
// mode) for the primary, owned and watched kinds, from PingSource, and from
// the operator's Broker through its Triggers (builder.WatchesEvents: any
// other CloudEvent that passes a Trigger's filter, matched with Knative's
// semantics, goes through its map function to the per-key queue like any
// other event; external.go).
//
// # The path of an event, top to bottom
//
//	handler.go  ServeHTTP admits and decodes the CloudEvent (package cloudevent);
//	route.go    route names the keys it concerns (the object, its controller
//	            owner, a map function's keys, a sweep's) and skips updates
//	            whose generation is already observed (package genskip);
//	handler.go  reconcileAll submits each key to the per-key queue (package
//	            keyq) and waits for a run that started after the request;
//	run.go      run takes the key's Lease (Options.Locker), then a reconcile
//	            slot (slot.go); runOnce calls the reconciler, its ctx
//	            carrying the logger and the stand-in;
//	settle.go   settle interprets (Result, error), writes observedGeneration,
//	            schedules what follows (a retrier: in-memory timers or
//	            durable Wakeups) and returns a Verdict;
//	handler.go  answer: the worst Verdict of the request's keys is the answer.
//
// # Guarantees
//
//   - Never two reconciles of one key at once in this process; events that
//     arrive while a key reconciles fold into one follow-up reconcile, held
//     until the key's events pause for Options.FollowUpSettle (2 ms; at most
//     FollowUpMaxSettle, 20 ms, after the reconcile before it ended), so a
//     burst that outlasts a reconcile costs one follow-up, not one per
//     reconcile it spans; distinct keys run in parallel up to
//     Options.MaxConcurrentReconciles: never more reconciler calls at once
//     than that.
//   - Across instances (Options.Locker, set when --max-scale > 1): never two
//     reconciles of one key at once anywhere. A run first takes the key's
//     coordination.k8s.io Lease (package lease: a create) unless this
//     instance kept it from the key's previous run: it is kept, renewed
//     every third of its duration, while runs of the key keep coming, and
//     deleted once the key has had none for Options.LeaseKeepIdle (1 s) or
//     on shutdown. A stream of events for a key thus costs two Lease writes
//     (and the renewals), not two per reconcile. Lease writes do not count
//     against MaxConcurrentReconciles: the queue then runs up to twice as
//     many keys, and a run holds one of MaxConcurrentReconciles reconcile
//     slots only around its reconcile (slot.go). So a key's Lease is taken
//     while another key reconciles, and then the key waits for a slot,
//     holding its Lease (events for it that arrive meanwhile join that
//     reconcile); an idle key's release, a hand-off and the releases on
//     shutdown wait for a reconcile only when MaxConcurrentReconciles
//     other keys already wait for a slot. An instance that gets an
//     event for a key another live instance holds forwards it there (next
//     item) or else marks the Lease dirty and answers 200 "handed off":
//     the holder reconciles once more before releasing (a holder that
//     keeps the Lease idle finds the mark when it
//     releases it: up to LeaseKeepIdle later). An instance that dies
//     keeping Leases leaves them to expire: the sweep then reconciles
//     their keys, once each, needlessly. If the holder dies, the
//     marking instance looks again at the Lease's expiry (in-process, and
//     as an Accepted Wakeup when durable time is on, so scaling to zero
//     loses nothing) and takes it over; a sweep reconciles every key whose
//     Lease expired. A look at the expiry of a Lease whose holder is alive
//     writes nothing: the mark it followed is on the Lease or was
//     reconciled.
//   - Forwarding (forward.go; when the instances advertise an address,
//     lease.Options.Address, --advertise-address, the default in a pod):
//     an object or Broker event for one key whose Lease a live other
//     instance holds is sent on to that instance (the original method,
//     headers, Authorization included, and body, plus
//     Opzero-Forwarded-By: <operator>/<identity>) instead of marking the
//     Lease, and its answer is the answer. The holder handles it as any
//     delivery: it checks the sender's token, queues the key (a run that
//     starts after the event arrived reconciles it, serialized with its
//     other runs) and, if it no longer holds the Lease, takes it or marks
//     it; it never forwards a forwarded request again, and answers 421 to
//     one for another operator. Cost: the first event an instance forwards
//     for a key costs it a create the API server refuses (409) and a read;
//     it then remembers the holder and its address until the Lease's
//     expiry, extended by each answer in which the holder says it still
//     keeps the Lease (Opzero-Lease-Until), and forwards the key's next
//     events without an API call. The holder writes nothing for them
//     beyond its renewals: a stream spread over N instances costs the
//     Lease writes of one. If the holder cannot take the event (refused or
//     broken connection, a timeout, an answer that is not from an instance
//     of this operator, 421, 429, 502-504: draining or dying), the
//     instance falls back to marking the Lease, as without forwarding, and
//     does not try that address again for a Lease duration. A SIGKILL of
//     the holder mid-forward therefore loses nothing: the forwarder's
//     connection breaks, it marks the Lease and looks again at its expiry
//     (it answers 200 "handed off"); had the forwarder died too, its
//     sender gets no 2xx and delivers again. Sweeps, wakeups, events
//     answered at admission and events for several keys are not
//     forwarded; they mark. Forwarded requests go to the instance's own
//     port, not through Knative's queue-proxy: containerConcurrency does
//     not bound them at the holder (MaxInFlight and
//     MaxConcurrentReconciles do), and the autoscaler counts them at the
//     forwarder, which holds the original request meanwhile.
//   - A 2xx answer means handled: reconciled, deliberately skipped, or
//     handed off to the instance holding the key's Lease. With
//     Options.AnswerAdmitted (see below) an object event's 200 means
//     admitted instead.
//   - A skipped update costs no reconcile and no API call.
//   - No cache unless Options.EventCache (--event-cache, opt-in: reads of
//     owned and watched objects are then answered from what Resource-mode
//     events delivered, and what earlier Gets read, while this instance is
//     warm, by the rules of standin.Cache: never older than what this
//     instance read or wrote, and dropped by any event that may make it
//     stale; lists and objects neither seen nor read go to the API server). Otherwise the
//     reconciler's client reads from the API server, except that in
//     Resource mode the reconcile's first Get of its own key is
//     answered from the newest object that arrived in an event for that key
//     since the previous reconcile started, if that object is the newest
//     version this instance knows of: never older than what the reconciler's
//     client (standin.Client) read or wrote. resourceVersions are compared
//     for equality only. The rule (standin.Versions): an event carrying an
//     unknown version is newer than the events before it (a watch delivers
//     one object's versions in order), unless this instance has read or
//     written a version that no event has carried back yet: the event may
//     then predate that write (Knative's adapter delivers one event at a
//     time, late), so the first Get goes to the API server. A version seen
//     before and since replaced (a redelivery) never stands in either, nor,
//     once this instance has seen the key deleted (a delete event, or a
//     read or write that found it missing), any event's object of the key
//     until the client reads it again: an event delivered after the
//     deletion may carry a copy from before it (finalizers still on). The
//     same holds for the event cache. Every later read goes to the API
//     server.
//   - A write that conflicts (409) after a Get answered from memory (the
//     event's object or the event cache) has the key reconciled once more
//     at once, every read going to the API server: with more than one
//     instance an event's object can be older than another instance's
//     write that this one has not seen, where a GET would have read the
//     newest. A second conflict, or one after reads from the API server
//     only, is a failed reconcile like any other (retried with backoff).
//   - Each reconcile's context carries a logger with the values
//     controller-runtime's controller gives it (controller, controllerGroup,
//     controllerKind, the Kind with namespace/name, namespace, name,
//     reconcileID, a new UUID per reconcile) and the reason it runs.
//   - Result{Requeue: true} is a success: answered 200, the requeue
//     scheduled after the key's backoff (rate limited, as controller-runtime
//     does), not counted as a failure. With WithAutoObservedGeneration a
//     successful reconcile writes status.observedGeneration, with or without
//     durable time; if that write fails, the reconcile counts as failed.
//
// The chaos tests (internal/wakeup/chaos_test.go) check these guarantees
// end to end: Knative's ApiServerSource adapter sends through a proxy that
// drops 10% of events while an instance is SIGKILLed every ~2 s and
// restarted, then one sweep runs. With one instance (TestChaos), and with
// three (TestChaosFleet: Leases kept while warm, forwarding on, events
// balanced round robin), each in both answer modes: no two reconciles of
// a key overlapped, events were forwarded to their keys' holders, and one
// sweep, once the killed instances' Leases had expired, converged every
// object and took over every Lease they had left.
//
// # Answering at admission (Options.AnswerAdmitted, --answer=admitted)
//
// Knative's ApiServerSource adapter delivers one event at a time and waits
// for each answer, so when the answer waits for the reconcile one source
// feeds one reconcile at a time: 1 / (reconcile latency) events per second.
// With AnswerAdmitted, an object event (ApiServerSource, Resource or
// Reference mode) is answered 200 "admitted" once its keys are in the
// per-key queue, and reconciled afterwards, up to MaxConcurrentReconciles
// keys at once. It is opt-in.
//
//   - 200 "admitted" then means: the event was decoded and routed, its keys
//     are queued in this process, and this process will reconcile each of
//     them in a run that starts after the event arrived, unless it is
//     SIGKILLed first. Nothing is written before the answer.
//   - A failed reconcile is retried with the key's backoff, as without
//     AnswerAdmitted (in-process timers, or Wakeups with durable time); a
//     run that could not happen (its Lease or a requeue could not be
//     recorded) is submitted again after the key's backoff, in-process.
//     Nobody sees the verdict but the log.
//   - SIGTERM (Knative scale-down): the instance stops accepting events
//     (503) and drains: every admitted key is reconciled, within
//     ServeOptions.ShutdownTimeout (25 s).
//   - A SIGKILL (OOM kill, node loss, a drain past the termination grace
//     period) loses the reconciles that were admitted and had not ended,
//     and the in-process retries, as a dropped event would. At most
//     MaxAdmitted (256) keys plus MaxConcurrentReconciles are at stake.
//   - What heals it: the anti-entropy sweep (the PingSource without data
//     that `opzero manifests` schedules, every 10 minutes by default)
//     reconciles every object whose generation is not observed and every
//     object being deleted with finalizers; with durable time, its
//     overdue Wakeups too; with Leases, every key whose Lease expired. A
//     lost event that changed neither the primary's generation nor its
//     deletion (an owned or watched object's change, a label change) is
//     healed by the full sweep ({"sweep":"all"}, every 6 hours by default)
//     or the object's next event.
//   - Past MaxAdmitted keys admitted and not yet reconciled, an event is
//     answered after its reconciles, as without AnswerAdmitted: the sender
//     is slowed to the reconciles' pace, and memory stays bounded.
//   - Never two reconciles of one key at once, as always; PingSource
//     sweeps and wakeups are still answered after their reconciles (a
//     sweep's 200 still means every key it named was reconciled).
//
// The trade-off: with one source, throughput is bounded by the
// reconciles (MaxConcurrentReconciles at once), not by one reconcile's
// latency; a crash can delay a reconcile until the next sweep.
//
// # HTTP answers
//
// Knative's senders retry some codes and not others (docs/knative-events.md),
// so each code is chosen for what the sender should do (Verdict.Outcome
// chooses it):
//
//	200  handled (reconciled, skipped, filtered, nothing to do); empty body, so
//	     a Broker does not take it for a malformed reply; the reason is in the
//	     Opzero-Result header; with AnswerAdmitted, also "admitted" (above)
//	202  async mode (Options.Async): the event is durably recorded and will be
//	     reconciled after the answer
//	400  malformed or unroutable event (an external event that passes no
//	     WatchesEvents filter, or whose map function returned a
//	     reconcile.TerminalError): never retried; the body names the problem
//	422  the reconcile returned a reconcile.TerminalError: retrying cannot help
//	     (no sender retries 422; a Broker dead-letters it)
//	200  also: the reconcile failed and its retry is a durable Wakeup
//	500  the reconcile failed; a retry with backoff is scheduled in this
//	     process. ApiServerSource does not retry 500 (no duplicate storm);
//	     a Broker does, which the per-key queue coalesces
//	413  the event is larger than Options.MaxBodyBytes
//	429  more than Options.MaxInFlight requests at once (Retry-After is set)
//	503  shutting down, the key's wait exceeded Options.MaxWait, the API
//	     server could not be read while routing (or a WatchesEvents map
//	     function failed), a reconcile failed because
//	     the API server could not be reached or was overloaded (connection
//	     refused or reset, network timeout, 429, 503, 504; without durable
//	     time, and a retry is scheduled in this process too), or a retry,
//	     requeue or Lease could not be recorded: every sender retries
//	     (Retry-After is set)
//
// # Several controllers on one endpoint (Group)
//
// A binary with several controllers runs one Engine per controller behind
// a Group: each event goes to the engines it concerns (an object event to
// those that watch its kind, a wakeup to the one it names, a forwarded
// request to the one that forwarded it, a PingSource tick to all), each
// with the guarantees above, and the answer is the worst of theirs, so a
// sender retries when any of them must. Two engines may not reconcile the
// same kind (wakeups and sweeps are routed by it).
//
// # Caveats
//
// Forwarding trusts the address on a Lease as much as the Lease itself:
// whoever may write the operator's Leases (its namespace's RBAC) can have
// its instances send the senders' tokens to another address. The tokens
// carry the operator's audience only.
//
// Without durable time (Options.Durable), retries and requeues are
// in-process timers: they die with the instance. Reference-mode events for owned kinds cost a GET to find the
// owner; a deleted dependent in Reference mode cannot be mapped (use
// Resource mode for owned kinds).
package serverless
