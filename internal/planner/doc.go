// Package planner is plan mode's machinery: a binary started with
// OPZERO_PLAN (operator.New, `opzero plan`) reconciles what the request
// names once per round with a client whose every write is server-side
// dry-run, and writes what those writes would change (internal/plan's
// Report) instead of serving.
//
// # Expected flow
//
//	Run      lists each controller's primary objects (-n, -l, a name;
//	         with Watched, also the keys its watched kinds map to);
//	round    reconciles them, Options.Concurrency at once, each with its
//	         timeout, its panics recovered, in a record carried by its
//	         context (operator.Planning reads it);
//	Client   sends every write through client.NewDryRunClient and records
//	         it with its field diff; the reconcile reads back its own
//	         writes, and later rounds read the round before's (overlay);
//	follow   turns a round's writes into the next round's reconciles, as
//	         the operator's events would (owned, watched, a primary's
//	         change that generation-aware skipping lets through).
//
// # Guarantees
//
//   - Nothing is written through the clients it builds: writes are
//     dry-run (DryRun: All), and Guard, under them, refuses before it
//     leaves the process any write that is not (Report.Refused). Events
//     given to Events are kept, never sent. No Lease, no Wakeup: plan mode
//     builds no engine.
//   - A reconcile that panics, errs, hangs past its timeout (left behind:
//     its later writes are still dry-run, and not recorded) or finds its
//     object deleted is reported on its object; the others are planned.
//   - The reads of round N+1 see round N's writes, never those of
//     another reconcile of the same round: the plan does not depend on the
//     order of one round's reconciles. Each read answered from the
//     overlay is said (Object.Inexact).
//
// # Caveats
//
// What the reconciler writes elsewhere than through its runtime's client
// is not dry-run: Foreign (rt.GetConfig()'s transport) sends its writes as
// dry-run and says so; External sees calls through http.DefaultClient;
// nothing sees a database driver. An Event is attributed by the object it
// regards (recorders carry no context). An update or patch of an object
// that only the plan created is recorded as sent, not dry-run. Apply
// (controller-runtime v0.22+) is dry-run through the embedded client but
// not recorded.
package planner
