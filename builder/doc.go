// Package builder describes an operator once, for either runtime: the
// primary kind (For, with an optional label selector), the dependents it
// owns (Owns: an event maps to the dependent's controller owner), other
// kinds it watches (Watches, with a map function that may read from the API
// server, because a serverless operator has no cache, and optionally
// ReferencedBy: the field in which primaries name a watched object, which
// lets a shared event source drop events no primary refers to), external
// CloudEvents from its Knative Broker (WatchesEvents: a Trigger's filter in
// Knative's terms and a map function from the event to keys), event
// filters, a name, and the reconcile.Reconciler; and how it is deployed (WithSweep,
// WithScale, WithConcurrency, and the environment it needs: WithEnv,
// WithSecretEnv), which `opzero manifests` turns into deploy objects.
//
//	err := builder.ControllerManagedBy(rt).
//		For(&v1.ConfigWatcher{}).
//		Watches(&corev1.ConfigMap{}, mapConfigMap, builder.ReferencedBy("spec.configMap")).
//		Complete(reconciler)
//
// # Guarantees
//
//   - Misuse (no For, For twice, an object whose kind the scheme does not
//     know, a nil map function or reconciler, an invalid name or
//     ReferencedBy field path, an event filter Knative would refuse or
//     silently skip) is collected and returned by Complete or Build, all
//     of it at once; the builder never panics.
//   - The resulting Controller is plain data: the serverless engine, the
//     classic engine and the manifest generator read the same description,
//     so there is no second list to keep in sync.
package builder
