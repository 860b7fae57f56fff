// Package classic links classic mode into an operator binary: the
// controller-runtime manager (informers, workqueue, leader election) behind
// --mode=classic, and NewManager, ctrl.NewManager for an existing
// controller-runtime (kubebuilder) project (docs/migrating.md).
//
// An operator's main that uses operator.New links classic mode with a blank
// import:
//
//	import _ "github.com/opzero/opzero/operator/classic" // --mode=classic
//
// Without it the binary is serverless only, the default: the manager and
// what only it needs (the cache, leader election, the webhook and metrics
// servers) are not linked, which keeps 2-3 MiB of RSS out of every
// instance, in either mode (docs/benchmarks.md), and operator.New refuses
// --mode=classic with operator.ErrClassicNotLinked, which names this import.
//
// # Guarantees
//
//   - The import is the only switch: no flag or environment variable links
//     or unlinks classic mode, so a binary can run --mode=classic if and
//     only if its main package (or something it imports) imports this one.
//   - NewManager in classic mode returns controller-runtime's own manager,
//     built from the ctrl.Options exactly as ctrl.NewManager builds it.
//
// # Caveats
//
// Importing this package registers classic mode in its init: it is meant
// for package main (and tests), not for a library, which would link the
// manager into every binary that imports it.
package classic
