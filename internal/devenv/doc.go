// Package devenv is the development environment: everything that plays a
// cluster's part on one machine, so that an operator written with opzero
// can be run, scaled to zero and tested without a cluster (and, as root,
// on a real one-node cluster built here). It has no code of its own; its
// subpackages are, by what they stand in for:
//
// # The cluster's machinery
//
//	pinned        finds (or builds into the user cache) the pinned
//	              binaries: etcd, kube-apiserver, kube-controller-manager,
//	              kubectl, Knative's adapters, the OTLP collector. Start
//	              here for "which binary runs".
//	controlplane  etcd, kube-apiserver, kube-controller-manager as
//	              processes (`opzero controlplane`, testenv, the tests)
//	knative       Knative's CRDs, and its real ApiServerSource adapter as
//	              a process
//	cluster       a real one-node cluster as root (`opzero cluster`):
//	              containerd, kubelet, CNI, CoreDNS, Knative; its e2e
//	              tests are `make e2e-cluster` and `make e2e-knative`
//	image         container images of a static binary, for that cluster
//	interp        a hook published as a python/node image with its script
//	              in a ConfigMap, run as a local interpreter
//
// # Knative's part, locally (`opzero dev`)
//
//	dev           `opzero dev`: applies manifests and plays Serving and
//	              Eventing from the objects it reads back; its event
//	              stream (--events=json, events.go). Start here for dev.
//	activator     scale to zero: start an operator on the first request,
//	              more instances under load, stop each when idle
//	broker        a Knative Broker and its Triggers, in memory
//	balancer      round-robin over engine processes (scale-out tests and
//	              benchmarks)
//	otelcol       a real OTLP endpoint (`opzero dev --otel`, tests)
//	timeline      `opzero dev timeline`: an SVG of a session's events
//
// # Driving `opzero dev`
//
//	devtest       for an e2e test: dev's platform inside the test process,
//	              its logs in the test's, stopped with the test
//	devsession    for the demos: `opzero dev --events=json` as a child
//	              process, waited on through its event stream
//
// The CLI (cmd/opzero) is thin over these; docs/dev.md, docs/controlplane.md
// and docs/cluster.md are their user-facing pages, docs/design.md has one
// line per package.
package devenv
