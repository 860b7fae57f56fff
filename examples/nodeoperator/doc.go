// Package nodeoperator is a Kubernetes operator nobody rebuilds with
// opzero, and not in Go: greeting-operator (operator/operator.js), a few
// dozen lines of Node.js on @dot-i/k8s-operator (npm, on
// @kubernetes/client-node), with its release as a platform team gets it
// (deploy/install.yaml: its CRD, RBAC and Deployment; no opzero in it).
// A Greeting gets a ConfigMap it owns and a status; the operator is
// level-triggered (its watches start with every object that exists).
//
// The repository holds its source only (package.json with exact versions
// and package-lock.json); Built runs npm ci and the package's bundle
// script (esbuild) into a temporary folder: one file, the operator and
// its node_modules, which is what the Dockerfile's image runs and what
// `opzero dev` and the real node's command image run.
//
// TestUnchangedNodeOperatorOnTheHub serves it at zero with the hub under
// `opzero dev` (its Subscription from `opzero hub adopt`'s derivation);
// internal/devenv/cluster's e2e (unchanged-node) does the same on the
// real node.
package nodeoperator
