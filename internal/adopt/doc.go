// Package adopt runs a controller built by controller-runtime's own builder
// (ctrl.NewControllerManagedBy(mgr).For(...).Owns(...).Watches(...)) without
// informers, so that an unchanged SetupWithManager works in a serverless
// operator.
//
// # Expected flow
//
// The controller is started against Cache, whose GetInformer returns an
// Informer shim per kind that only records the event handlers the
// controller's sources register (controller-runtime's handler, with the
// user's predicates, bound to the controller's queue), and reports itself
// synced. The controller's queue is replaced (its exported NewQueue field)
// by a capture queue: Get blocks until shutdown, so the controller's own
// workers never reconcile. Deliver then plays one event (an ApiServerSource
// CloudEvent, decoded) through the recorded handlers and returns the
// reconcile.Requests they added: exactly what the handlers and predicates
// would have put on the workqueue in a classic manager. The caller runs
// them through opzero's per-key queue, reconciling with the controller's
// own Reconcile (its panic recovery and timeout).
//
// # Guarantees
//
//   - The user's handlers (EnqueueRequestForObject, EnqueueRequestForOwner,
//     EnqueueRequestsFromMapFunc, custom ones) and predicates run unchanged.
//   - Deliver calls the handlers one event at a time per controller, so the
//     requests it returns are that event's and no other's.
//   - Updates carry the previous object this process saw for the key (the
//     last one delivered); when there is none (a fresh instance, after
//     scale to zero), the update is delivered as a create with
//     IsInInitialList set, as an informer delivers objects that existed
//     when it started. So GenerationChangedPredicate, which compares old
//     and new, never drops a change it has not seen the old state of: a
//     cold instance may reconcile once more than a warm informer would,
//     never less.
//
// Each controller is adopted with a Cache of its own (Fork of the
// manager's: the same reader and field indexes), so that Deliver runs its
// sources' handlers only, however many controllers watch the kind.
//
// # Caveats
//
// Controllers of controller-runtime v0.21 to v0.25 are adopted; a binary
// linking another version is refused with an error naming it and the
// range (CheckControllerRuntime), and so is a controller whose shape (the
// exported fields Name, NewQueue, LogConstructor of controller-runtime's
// internal controller) is not the one those versions have. Requests added outside a
// Deliver (a custom source, a goroutine of the user's) go to the fallback
// function given to Adopt. Field indexes (IndexField) are applied by
// listing without the indexed requirement and filtering with the index
// function: one API list per List, never an informer.
package adopt
