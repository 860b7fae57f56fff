// Package image builds container images of one static binary each, the way
// opzero's local cluster gets every image it runs without a registry: the
// binary in a single layer on an empty base (go-containerregistry's
// empty.Image and mutate.AppendLayers), an entrypoint, user 65532 (Knative's
// pods set runAsNonRoot), written as one docker-archive tarball that
// `ctr -n k8s.io images import` (what `kind load image-archive` does) loads
// into containerd.
//
// # Guarantees
//
//   - The tag is the first 12 hex digits of the binary's SHA-256 (Tag), so
//     a reference names exactly one binary and never "latest": kubelet's
//     default pull policy for such a tag (IfNotPresent) never pulls.
//   - The layer is reproducible: fixed modification times and owners, so
//     the same binary gives the same image digest.
//
// # Caveats
//
// The image holds the binary and an empty /tmp, nothing else: no shell, no
// CA certificates, no /etc/passwd (the user is numeric).
package image
