package manifests_test

import (
	"fmt"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// Generate from a description (Build gets one by running the operator's
// binary; here it is written out, without CRDs).
func ExampleGenerate() {
	in := manifests.Input{
		ImportPath: "example.com/op/cmd/op",
		Operator: description.Controller{
			Name:    "op",
			Primary: description.Kind{Group: "example.com", Version: "v1", Kind: "Thing", Resource: "things"},
			Watched: []description.Kind{{Version: "v1", Kind: "Secret", Resource: "secrets"}},
			Deploy:  description.Deploy{Sweep: "*/10 * * * *", MaxScale: 2},
		},
	}
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "ops", Source: manifests.SourceKnative, NoDurableTime: true})
	if err != nil {
		panic(err)
	}
	for _, o := range objs {
		fmt.Printf("%-20s %-18s %s\n", o.File, o.Kind(), o.Name())
	}
	// Output:
	// rbac.yaml            ServiceAccount     op
	// rbac.yaml            ServiceAccount     op-secret
	// rbac.yaml            ServiceAccount     op-thing
	// rbac.yaml            ClusterRole        opzero:ops:op
	// rbac.yaml            ClusterRole        opzero:ops:op-secret-source
	// rbac.yaml            ClusterRole        opzero:ops:op-thing-source
	// rbac.yaml            ClusterRoleBinding opzero:ops:op
	// rbac.yaml            ClusterRoleBinding opzero:ops:op-secret-source
	// rbac.yaml            ClusterRoleBinding opzero:ops:op-thing-source
	// rbac.yaml            Role               op-leases
	// rbac.yaml            RoleBinding        op-leases
	// operator.yaml        Service            op
	// sources.yaml         ApiServerSource    op-secret
	// sources.yaml         ApiServerSource    op-thing
	// sources.yaml         PingSource         op-sweep
}

// With the hub (--source=hub): a Subscription and the hub's read role per
// operator, the hub itself in hub.yaml (with the Service and rights of its
// admission endpoint, which serves operators' webhooks), and no Knative
// sources.
func ExampleGenerate_hub() {
	in := manifests.Input{
		ImportPath: "example.com/op/cmd/op",
		Operator: description.Controller{
			Name:    "op",
			Primary: description.Kind{Group: "example.com", Version: "v1", Kind: "Thing", Resource: "things"},
			Watched: []description.Kind{{Version: "v1", Kind: "Secret", Resource: "secrets", ReferencedBy: "spec.secretName"}},
			Deploy:  description.Deploy{Sweep: "*/10 * * * *", MaxScale: 2},
		},
	}
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "ops", Source: manifests.SourceHub, NoDurableTime: true})
	if err != nil {
		panic(err)
	}
	for _, o := range objs {
		fmt.Printf("%-14s %-18s %s\n", o.File, o.Kind(), o.Name())
	}
	// Output:
	// hub.yaml       Namespace          opzero-system
	// hub.yaml       ServiceAccount     opzero-hub
	// hub.yaml       ClusterRole        opzero-hub
	// hub.yaml       ClusterRole        opzero-hub-admission
	// hub.yaml       ClusterRole        opzero-hub-base
	// hub.yaml       ClusterRoleBinding opzero-hub
	// hub.yaml       Role               opzero-hub
	// hub.yaml       Role               opzero-hub-webhook-certs
	// hub.yaml       RoleBinding        opzero-hub
	// hub.yaml       RoleBinding        opzero-hub-webhook-certs
	// hub.yaml       Deployment         opzero-hub
	// hub.yaml       PodDisruptionBudget opzero-hub
	// hub.yaml       Service            opzero-hub
	// hub.yaml       Service            opzero-hub-peers
	// rbac.yaml      ServiceAccount     op
	// rbac.yaml      ClusterRole        opzero-hub:ops:op
	// rbac.yaml      ClusterRole        opzero:ops:op
	// rbac.yaml      ClusterRoleBinding opzero:ops:op
	// rbac.yaml      Role               op-leases
	// rbac.yaml      RoleBinding        op-leases
	// operator.yaml  Service            op
	// sources.yaml   Subscription       op
}
