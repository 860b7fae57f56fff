// Package reconcileutil holds what reconcilers need in both modes: finalizers,
// status writes that survive optimistic-concurrency conflicts,
// observedGeneration and the Ready condition, and Kubernetes Event
// recorders that write before they return.
//
// # Finalizers: expected flow
//
//	if deleting, err := reconcileutil.HandleDeletion(ctx, c, obj, fin, cleanup); deleting || err != nil {
//		return reconcile.Result{}, err // cleanup ran and the finalizer is gone, or retry
//	}
//	if _, err := reconcileutil.EnsureFinalizer(ctx, c, obj, fin); err != nil { ... }
//
// EnsureFinalizer adds the finalizer once (a merge patch, no conflict);
// HandleDeletion runs cleanup only while the finalizer is present, then
// removes it, so running it twice is harmless.
//
// # Events
//
// A serverless process may be stopped right after it answers, so
// EventRecorder and LegacyEventRecorder create each Event synchronously
// (bounded by a 5 s timeout) instead of buffering it like client-go's
// broadcaster. Each call creates one Event; identical events are not
// aggregated into a series. The serverless runtime's recorders
// (operator.Runtime.GetEventRecorder) give them a client whose Event
// writes go on beside the reconcile, and each answer waits until those
// under way have ended: the same guarantee, one round trip sooner.
package reconcileutil
