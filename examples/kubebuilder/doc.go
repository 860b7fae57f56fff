// Package kubebuilder is the proof that an existing kubebuilder project is
// adopted by changing only its cmd/main.go: its e2e test builds kubebuilder
// v4 from the Go module proxy, generates a project with `kubebuilder init`
// and `create api`, adds the reconciler in testdata (an owned Deployment, a
// finalizer, status conditions, Events, Requeue and RequeueAfter), applies
// the migration of docs/migrating.md (testdata/main.go.diff) and runs the
// project serverless through opzero dev, with Knative's real
// ApiServerSource adapter, and classic.
package kubebuilder
