// Package kubebuilder is the proof that an existing kubebuilder project is
// adopted by changing only its cmd/main.go: its e2e test builds kubebuilder
// v4 from the Go module proxy, generates a project with `kubebuilder init`
// and `create api`, adds the reconciler in testdata (an owned Deployment, a
// finalizer, status conditions, Events, Requeue and RequeueAfter), applies
// the migration of docs/migrating.md (testdata/main.go.diff) and runs the
// project serverless through opzero dev, with Knative's real
// ApiServerSource adapter, and classic. TestKubebuilderMultigroupAdopted
// shows all of issue 28 on one project: multigroup, three APIs in two
// groups, a defaulting and validating webhook, generated on the oldest
// supported controller-runtime; its own make test, serverless through
// opzero dev with the webhooks called by the API server, and classic.
package kubebuilder
