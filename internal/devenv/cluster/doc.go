// Package cluster runs a real one-node Kubernetes cluster on this machine,
// as root, from opzero's pinned builds and Debian's packages: the local
// control plane (package controlplane) plus kube-scheduler, kubelet and
// kube-proxy (iptables mode) of the same Kubernetes, containerd and runc,
// the CNI bridge, host-local, loopback and portmap plugins, and CoreDNS as a
// pod. Every image it runs is built here (package image) and imported into
// containerd; nothing is pulled. It is what `opzero cluster up|down|status`
// and `make e2e-cluster` stand on.
//
// With Options.Knative it then installs Knative Serving and Eventing core
// v0.50.0 from the pinned modules' own release YAMLs (config/core, and the
// files their links point to), every ko:// image rewritten to one built
// here, tag resolution skipped for opzero.local, and Traefik (its
// experimental Knative provider) as Serving's ingress: config-network's
// ingress-class is Traefik's.
//
// Cluster.ResolveKo (`opzero cluster apply`) is `ko apply` without a
// registry: every ko:// image of a manifest is built here (a static linux
// binary, `go build`), imported into the node (Cluster.Import, what `kind
// load image-archive` does) as opzero.local/<import path>:<binary digest>
// and replaced; nothing else in the manifest changes. Cluster.ResolveCommands
// does the same for a Knative Service or Deployment annotated
// dev.opzero.dev/command (a hook `opzero dev` runs as a local process):
// the command's program (Debian's, an ELF file), the libraries ldd lists,
// Python's standard library for python3, the script's folder at /app,
// imported as opzero.local/command/<name>:<hash>. `make e2e-knative`
// (operator_e2e_test.go) applies the examples' generated manifests that way
// and checks them on real Knative.
//
// # Expected flow
//
// Up checks the machine (Check), finds or builds the binaries (package
// pinned: the cluster set), records the kernel settings it may change, then
// lays the network, starts the control plane, containerd, kubelet,
// kube-proxy and kube-scheduler, imports the images and applies CoreDNS,
// and returns once the node is Ready and CoreDNS answers. State.json in
// the state folder records everything it made; Down reads it and removes it
// all: pods, containers, processes, mounts, cgroups, the network namespace
// with its links, routes and iptables rules, the host routes, the folders it
// created outside the state folder, the kernel settings, the state folder.
//
// # The network (the machine's rule: nothing leaves it)
//
// The node (containerd, kubelet, kube-proxy, so the CNI bridge, the pods and
// every iptables rule kube-proxy writes) lives in a network namespace of
// its own, opzero-node, whose only links are loopback, the pods' bridge
// opz0 (10.244.0.0/24) and a veth pair to the host (10.243.0.1 on the host,
// opz-host; 10.243.0.2 in the node, opz-node). The node namespace has no
// default route; blackhole routes cover the pod range 10.244.0.0/16 and the
// Service range 10.96.0.0/16 there and on the host, set before anything
// starts; the host reaches the node's pods only through the veth (one /24
// route), and its forwarding setting is not touched. The node forwards only
// between pods and between pods and the host's 10.243.0.1 (the API server);
// pods cannot reach kubelet's port. The control plane and kube-scheduler run
// on the host, the API server bound to 10.243.0.1 only. CoreDNS answers
// cluster.local (and reverse zones) and refuses every other name: it has no
// forwarder.
//
// # Caveats
//
//   - One cluster per machine (the namespace and link names are fixed);
//     root only; Linux with cgroup v1 or v2, overlayfs and br_netfilter.
//   - kubelet changes a few global kernel settings at start
//     (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...); Up
//     records them first and Down puts them back.
//   - Node components authenticate as the plane's admin (system:masters);
//     kubelet serves its API to anyone who reaches 10.243.0.2:10250, which
//     only the host can.
package cluster
