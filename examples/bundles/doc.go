// Package bundles is a test project written for opzero in the shape of a
// published cache-heavy operator that distributes data from one namespace
// into a ConfigMap in every namespace (issue 53): a controller-runtime
// project whose main (cmd) is a cobra command with pflag flags of its own
// (--leader-elect, --readiness-probe-port, --trust-namespace, ...), a
// For-less controller (Watches of its cluster-scoped Bundle with
// EnqueueRequestForObject), a manager cache restricted to the trust
// namespace (ByObject for ConfigMaps and Secrets), a second cache it
// builds with cache.New for its targets, watched metadata-only
// (WatchesRawSource, source.Kind of PartialObjectMetadata ConfigMaps,
// EnqueueRequestForOwner), every Namespace watched (a new one gets its
// target), and a validating webhook declared in YAML
// (config/webhook/validating.yaml), not with markers.
//
// It is adopted as an existing project is: cmd/main.go is its only file
// that names opzero; testdata/classic_main.go.txt is the main before
// adoption. Its tests run `opzero manifests` on it and run it at zero
// through opzero dev on a real API server (bundles_test.go).
package bundles
