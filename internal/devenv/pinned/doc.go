// Package pinned finds the programs opzero runs but does not contain, built
// from pinned Go modules: the local control plane (etcd, kube-apiserver,
// kube-controller-manager, kubectl from k8s.io/kubernetes), Knative's
// ApiServerSource and PingSource adapters (knative.dev/eventing), Knative's
// CRDs, the one-node cluster's programs, and imagebuild, the program that
// writes the cluster's images with go-containerregistry (so that opzero's
// own module requires none of it). It needs no opzero checkout: the pinned
// modules' go.mod, go.sum and main.go files are embedded (copies of the
// modules under tools/, kept equal by `go generate` and a test).
//
// # Where binaries are found
//
// For each binary, in this order:
//
//  1. the --bin-dir flag (Resolver.Dir), if given: the only place looked;
//  2. else $OPZERO_BIN_DIR, if set: the only place looked;
//  3. else $KUBEBUILDER_ASSETS (envtest's binaries), for etcd,
//     kube-apiserver and kubectl, if it holds them;
//  4. else the versioned user cache, $XDG_CACHE_HOME/opzero/<Version>
//     (~/.cache/opzero/<Version>), where a missing binary is built from the
//     embedded module first, with an estimate and a progress line every 10 s
//     (about 9 minutes for the control plane on 2 cores with a cold Go build
//     cache). `opzero install` fills it ahead of time.
//
// Knative's CRDs are read from the knative-crds folder of the first of 1, 2
// and 4, fetched into the cache with `go mod download` the first time.
//
// # Guarantees
//
//   - Version names the pins (Kubernetes and Knative versions and a hash of
//     every pinned file): a pin change uses a new folder, so a binary in the
//     cache is always one built from the current pins and is never rebuilt.
//   - A binary appears in its folder at once (written aside, then renamed),
//     and one process at a time fills a folder (a file lock): test packages
//     started together build once.
//   - Binaries of a folder whose stamp (.controlplane.pins, .knative.pins:
//     the hash of the pinned go.mod and go.sum, as `make bins` wrote it)
//     matches are hard-linked instead of built: Resolver.From, and older
//     cache folders when only the other set's pins changed.
//   - Every error says what to do: `opzero install`, --bin-dir or
//     OPZERO_BIN_DIR.
//
// # Caveats
//
// Building needs Go on PATH and the Go module proxy. Binaries taken from
// KUBEBUILDER_ASSETS are whatever version envtest installed there; the
// control plane's kube-controller-manager then still comes from the pins.
package pinned
