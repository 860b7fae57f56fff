package manifests_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// TestSeveralControllersOneService: a binary with two controllers
// (ConfigWatchers, which watch ConfigMaps; Pods, which own ConfigMaps and
// Secrets) gets one Knative Service named after its module and one source
// per kind for both: ConfigMaps in Resource mode without an owner filter
// (owned by one, watched by the other), Secrets with the Pod owner filter,
// the RBAC of both primaries, and one wakeup source for both controllers'
// Wakeups; the hub wiring is refused.
func TestSeveralControllersOneService(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cw := in.Operator
	pods := description.Controller{Name: "pods", Deploy: cw.Deploy,
		Primary: description.Kind{Version: "v1", Kind: "Pod", Resource: "pods", GoPackage: "k8s.io/api/core/v1"},
		Owned: []description.Kind{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", GoPackage: "k8s.io/api/core/v1"},
			{Version: "v1", Kind: "Secret", Resource: "secrets", GoPackage: "k8s.io/api/core/v1"}}}
	in.Operators = []description.Controller{cw, pods}
	if in.Operator, err = manifests.Combine("My_Project", in.Operators); err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	sources := map[string]string{}
	var wakeupArgs []string
	var primaries []string
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o.Obj}
		switch u.GetKind() {
		case "Service":
			services = append(services, u.GetName())
		case "ApiServerSource":
			res, _, _ := unstructured.NestedSlice(u.Object, "spec", "resources")
			mode, _, _ := unstructured.NestedString(u.Object, "spec", "mode")
			owner, _, _ := unstructured.NestedString(u.Object, "spec", "owner", "kind")
			sources[fmt.Sprint(res[0].(map[string]any)["kind"])] = mode + "," + owner
		case "Deployment":
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			wakeupArgs, _, _ = unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
		case "ClusterRole":
			if u.GetName() != "opzero:ns:my-project" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
			for _, r := range rules {
				m := r.(map[string]any)
				if slices.Contains(m["verbs"].([]any), any("update")) {
					primaries = append(primaries, fmt.Sprint(m["resources"]))
				}
			}
		}
	}
	if fmt.Sprint(services) != "[my-project]" {
		t.Errorf("Knative Services %v, want one named after the module: my-project", services)
	}
	want := map[string]string{"ConfigWatcher": "Resource,", "ConfigMap": "Resource,", "Pod": "Resource,", "Secret": "Resource,Pod"}
	if fmt.Sprint(sources) != fmt.Sprint(want) {
		t.Errorf("sources (kind: mode,owner) %v, want %v", sources, want)
	}
	if !slices.Contains(wakeupArgs, "--operator=configwatcher,pods") {
		t.Errorf("wakeup source args %v, want --operator=configwatcher,pods", wakeupArgs)
	}
	all := strings.Join(primaries, " ")
	if !strings.Contains(all, "configwatchers") || !strings.Contains(all, "pods") {
		t.Errorf("the ClusterRole's write rules cover %s, want both primaries", all)
	}
	if _, err := manifests.Generate(in, manifests.Options{Namespace: "ns", Source: manifests.SourceHub}); err == nil ||
		!strings.Contains(err.Error(), "--source=hub: the binary runs 2 controllers (configwatcher, pods)") {
		t.Errorf("--source=hub with two controllers: %v", err)
	}
}
