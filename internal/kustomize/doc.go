// Package kustomize renders a kustomization the way `kustomize build` and
// `kubectl apply -k` do, with kustomize's own library (krusty), and reads
// from an adopted kubebuilder or operator-sdk project's config/ what it
// declares for its manager: the manager container's env, envFrom,
// resources and security context, the pod's security context, its
// namespace (and the Namespace object config/ makes for it), and the
// kustomization's namePrefix and labels. opzero manifests carries these
// into the Knative Service and the classic Deployment; opzero dev and
// opzero cluster apply render -k folders (and -f folders that hold a
// kustomization) with Render.
//
// # Guarantees
//
//   - Rendering is kustomize's, not a copy of it: krusty with kustomize's
//     defaults (load restrictions root-only, no plugins, no exec or Helm),
//     so what renders here renders with `kustomize build`, and an error is
//     kustomize's own, wrapped with the folder.
//   - ReadManager never guesses between two managers: the manager is the
//     one Deployment with a container named "manager" (kubebuilder's and
//     operator-sdk's scaffold), else the one labelled
//     control-plane=controller-manager; none or several is an error naming
//     the kustomization.
//
// # Caveats
//
//   - NamePrefix and Labels are those of the rendered kustomization file
//     itself (config/default's, where kubebuilder puts them); a prefix or
//     labels that only a base it includes declares are not read.
//   - Only the CLI links this package (internal/depcheck): the operator
//     runtime, the hub and the wakeup source do not.
package kustomize
