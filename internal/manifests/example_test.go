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
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "ops", NoDurableTime: true})
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
