// Package operator is the runtime a user's main talks to, in either mode:
//
//	rt, err := operator.New(opts)            // opts.Mode: serverless or classic
//	r := &MyReconciler{Client: rt.GetClient(), Recorder: rt.GetEventRecorder("my-operator")}
//	err = builder.ControllerManagedBy(rt).For(&v1.Thing{}).Complete(r)
//	err = rt.Start(ctx)
//
// An existing controller-runtime (kubebuilder) project keeps its main and its
// SetupWithManager calls and replaces ctrl.NewManager with NewManager, which
// returns a manager.Manager in either mode (docs/migrating.md).
//
// It mirrors the parts of controller-runtime's manager a reconciler uses
// (GetClient, GetScheme, GetEventRecorder, GetEventRecorderFor), so a
// reconciler written for a manager runs unchanged.
//
// # Guarantees
//
//   - Serverless: the client reads from the API server (no cache, no
//     informers); Kubernetes Events are written synchronously, before the
//     reconcile returns, hence before the HTTP answer.
//   - Classic: the manager's cached client, informers and workqueue, leader
//     election on by default.
//   - Both: the same builder.Controller, the same generation-aware skipping
//     and automatic observedGeneration.
//
// # Caveats
//
// One operator per runtime in serverless mode (one HTTP endpoint, one
// Knative Service). A binary built with -tags opzero_serverless has no
// classic mode (ClassicAvailable is false; New refuses Classic): the
// controller-runtime manager is not linked, which lowers its size and RSS.
package operator
