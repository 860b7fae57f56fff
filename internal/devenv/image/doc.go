// Package image builds container images of one static binary each, the way
// opzero's local cluster gets every image it runs without a registry: the
// binary in a single layer on an empty base, an entrypoint, user 65532
// (Knative's pods set runAsNonRoot), written as one docker-archive tarball
// that `ctr -n k8s.io images import` (what `kind load image-archive` does)
// loads into containerd. This package says what each image holds and how
// it is tagged; the tarball is written by imagebuild (tools/imagebuild,
// pinned.ImageBuild: go-containerregistry's empty.Image,
// mutate.AppendLayers and tarball.MultiRefWriteToFile), a program found and
// built the first time like every pinned binary, so that opzero's module
// requires no go-containerregistry. Read reads an image back
// with the standard library. Spec.Files adds more files to the layer (a dynamically
// linked interpreter's libraries and standard library, a script), at
// their own paths, with Spec.Path placing the binary and Spec.WorkDir the
// working folder.
//
// # Guarantees
//
//   - The tag is the first 12 hex digits of the binary's SHA-256 (Tag), so
//     a reference names exactly one binary and never "latest": kubelet's
//     default pull policy for such a tag (IfNotPresent) never pulls.
//     With Files, the tag hashes every file, its place and mode, and the
//     entrypoint's arguments, user and working folder.
//   - The layer is reproducible: fixed modification times and owners, so
//     the same files give the same image digest.
//
// # Caveats
//
// Write runs imagebuild: the first time, it is built into opzero's cache
// (Go and the module proxy, well under a minute), unless --bin-dir /
// $OPZERO_BIN_DIR names a folder, which must then hold it (`opzero install
// cluster`).
//
// The image holds the binary, Files and an empty /tmp, nothing else: no
// shell, no CA certificates, no /etc/passwd (the user is numeric). Files
// are copied (links followed), never linked.
package image
