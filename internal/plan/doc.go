// Package plan is the wire format and the rendering of a plan: what an
// operator binary run with --mode=plan would write, object by object,
// without writing it (package internal/planner makes one; `opzero plan`
// reads and prints it).
//
// A binary in plan mode reads its Request from the environment (Env, JSON)
// and writes its Report there (Request.Out), so the CLI never parses the
// operator's logs.
//
// # Guarantees
//
//   - Standard library only: the CLI links nothing of controller-runtime
//     to read a plan.
//   - A Report is deterministic for the same cluster state: objects are
//     sorted by controller, namespace, name and round, each object's writes
//     in the order the reconciler sent them, field changes by path.
//   - Changed is true exactly when some write would change the cluster
//     (a create, a delete, or an update or patch whose field diff is not
//     empty) or an Event would be recorded; ExitCode follows `kubectl
//     diff`: 0 nothing would change, 2 something would, 1 the plan could
//     not say for some object (an error, a timeout, a panic, a forbidden
//     read), whatever else it found.
//   - Field diffs leave out metadata.managedFields, resourceVersion,
//     generation, creationTimestamp and uid: what the API server derives
//     on every write, never what a reconciler chose (and apiVersion and
//     kind, which a typed client may or may not decode).
//
// # Caveats
//
// A Report says what the reconcilers would send and what the API server's
// dry-run answered (admission webhooks and defaulting included); it cannot
// say what other controllers would do with those writes. Each object lists
// the reasons its plan is not exact (Object.Inexact).
package plan
