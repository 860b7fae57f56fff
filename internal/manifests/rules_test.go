package manifests_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// TestDescribedRulesInTheClusterRole: the RBAC rules a description names
// (an operator whose kinds are known only when it runs) are granted to the
// operator, and only to it.
func TestDescribedRulesInTheClusterRole(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in.Operator.Rules = []description.Rule{{APIGroups: []string{"example.com"}, Resources: []string{"helloworlds"}, Verbs: []string{"get", "update"}}}
	objs, err := manifests.Generate(in, manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string]int{}
	for _, o := range objs {
		if o.Obj["kind"] != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Obj, "rules")
		for _, r := range rules {
			m := r.(map[string]any)
			if res, _ := m["resources"].([]any); len(res) == 1 && res[0] == "helloworlds" {
				name, _, _ := unstructured.NestedString(o.Obj, "metadata", "name")
				granted[name] = len(m["verbs"].([]any))
			}
		}
	}
	if len(granted) != 1 || granted["opzero:default:configwatcher"] != 2 {
		t.Fatalf("helloworlds granted in %v, want get and update in the operator's ClusterRole only", granted)
	}
}
