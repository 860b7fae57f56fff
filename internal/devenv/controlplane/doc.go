// Package controlplane runs a local Kubernetes control plane as plain
// processes: etcd, kube-apiserver and kube-controller-manager, built from a
// pinned module and found by package pinned (--bin-dir, $OPZERO_BIN_DIR,
// $KUBEBUILDER_ASSETS, then the user cache, built there on first use).
//
// It is what `opzero controlplane up|down|status`, the test harness
// (package testenv) and `make demo` stand on.
//
// # Expected flow
//
// Up creates a state folder, generates a service-account signing key and
// static bearer tokens, starts etcd, then kube-apiserver (RBAC authorization,
// service-account issuer so TokenRequest, TokenReview and OIDC discovery
// work), then kube-controller-manager (garbage collector, deployment,
// replicaset, namespace, serviceaccount and token controllers), waits until
// each is ready, and writes a kubeconfig and state.json holding the PIDs.
// Down reads state.json and stops exactly those processes.
//
// # Guarantees
//
//   - Up either returns a ready plane or stops everything it started and
//     returns an error that says what to do (port in use, missing binaries,
//     a state folder left by an earlier plane).
//   - Down only signals a PID whose command line is still the binary Up
//     started, so a PID reused by the system is never killed.
//   - With Options.DieWithParent the processes are killed by the kernel when
//     the process that started them dies, even on a panic (used by tests).
//
// # Caveats
//
// There is no scheduler and no kubelet: Pods are created and stay Pending.
// etcd runs with --unsafe-no-fsync: the plane is for development and tests.
// Its space quota is 8 GiB (the default is 2 GiB), room for a million
// small objects.
package controlplane
