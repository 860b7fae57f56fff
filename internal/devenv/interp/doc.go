// Package interp recognizes a hook hosted as Metacontroller's published
// examples host theirs: a Deployment whose container runs a public
// interpreter image (python:3.11, node:20, ...) on a script mounted from
// a ConfigMap (volumeMounts of configMap volumes). `opzero dev` runs it
// as a local process with the local interpreter and the ConfigMap's files
// (Materialize); `opzero cluster apply` gives it an image of that
// interpreter (package cluster), with no dev.opzero.dev/command needed.
//
// # Guarantees
//
//   - Recognized images are those whose repository's last path element is
//     python or node (any registry, tag or digest: python:3.11,
//     docker.io/library/python:3-slim, node@sha256:...); their programs are
//     the local python3 (python2 for a python image tagged 2.x) and node,
//     found on $PATH. The command line is the container's
//     command then args (args alone when command is empty, as the image's
//     entrypoint would run them; a node image given a script runs node on
//     it); its first word must be that interpreter (python, python3,
//     python3.11, /usr/local/bin/python; node, nodejs).
//   - An image that is not recognized, a command line that does not start
//     with its interpreter (sh -c ...), or a pod of several containers is
//     ErrNotRecognized, whose
//     message names the annotation dev.opzero.dev/command.
//   - Materialize writes each mounted ConfigMap's files (data and
//     binaryData, honouring items and subPath) under a local folder and
//     rewrites every argument (and the working folder) naming a path under
//     a mountPath to the same path under that folder. MaterializeSecrets
//     writes secret volumes' files too (their data decoded) and makes each
//     emptyDir an empty folder; NeedsPaths says the hook mounts one, so
//     `opzero dev` gives it every mount at its mountPath (package mountns).
//   - Write (Paths computes the rewritten arguments without writing) is
//     MaterializeSecrets' first half. A required configMap or secret
//     volume whose object does not exist (its reader returns
//     ErrNotFound) is a *MissingError naming it, which a caller waits on
//     as a kubelet does; an optional one is an empty folder and its
//     missing items keys are left out, as a kubelet mounts it.
//
// # Caveats
//
// Only configMap, secret and emptyDir volumes are materialized (not
// projected, downwardAPI or others); a script in an image layer is not. The files are written once, when `opzero
// dev` starts: a ConfigMap changed later is not seen by the running
// process (start `opzero dev` again). The local interpreter's version is the
// machine's, not the image's tag, and no packages are installed: hooks
// that use only the standard library (as Metacontroller's do) run.
package interp
