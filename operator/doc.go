// Package operator is the runtime a user's main talks to, in either mode:
//
//	rt, err := operator.New(opts)            // opts.Mode: serverless or classic
//	r := &MyReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("my-operator")}
//	err = builder.ControllerManagedBy(rt).For(&v1.Thing{}).Complete(r)
//	err = rt.Start(ctx)
//
// Classic mode is linked only into a binary whose main imports package
// operator/classic (import _ "github.com/opzero/opzero/operator/classic");
// without it the binary is serverless only and New refuses Classic with
// ErrClassicNotLinked. An existing controller-runtime (kubebuilder) project
// keeps its main and its SetupWithManager calls and replaces ctrl.NewManager
// with classic.NewManager, which returns a manager.Manager in either mode
// (docs/migrating.md).
//
// It mirrors the parts of controller-runtime's manager a reconciler uses
// (GetClient, GetScheme, GetEventRecorder, GetEventRecorderFor), so a
// reconciler written for a manager runs unchanged.
//
// A binary started with OPZERO_PLAN set (`opzero plan`, docs/plan.md)
// plans instead of serving, in either mode: Start reconciles the objects
// the request names once, every write sent as server-side dry-run and
// recorded, writes the plan and returns; Planning(ctx) tells a reconciler
// it is planned, so that it skips what opzero cannot dry-run.
//
// # Guarantees
//
//   - Serverless: the client reads from the API server (no cache, no
//     informers); Kubernetes Events are written while the reconcile goes
//     on (its next call does not wait for them) and before the HTTP answer:
//     every answer, and the drain, waits for the Event writes under way.
//   - Classic: the manager's cached client, informers and workqueue, leader
//     election on by default.
//   - Both: the same builder.Controller, the same generation-aware skipping
//     and automatic observedGeneration.
//
// # Caveats
//
// Several controllers may share one runtime (builder.ControllerManagedBy
// once per controller): in serverless mode they are served on one HTTP
// endpoint, one Knative Service, each event going to the controllers whose
// kinds it concerns and answered when all have reconciled
// (internal/engine/serverless Group); two controllers may not reconcile the
// same kind, and they share the Service's scale and deployment settings
// (docs/migrating.md, "Known limits"). Leaving classic mode out (the default) keeps the
// controller-runtime manager out of the binary, which lowers its size and
// RSS. Once a serverless instance has answered its first event and is idle
// for 100 ms, it trims once (internal/trim): the heap's garbage goes back to
// the kernel and the binary's code and read-only pages are unmapped, to be
// mapped again as the next events run them; OPZERO_TRIM=off turns it off.
package operator
