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
// Wakeups (--source=knative; the hub wiring: TestSeveralControllersOneSubscription).
func TestSeveralControllersOneService(t *testing.T) {
	in := twoControllers(t)
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "ns", Source: manifests.SourceKnative})
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
}

// twoControllers is a binary running the ConfigWatcher controller and a
// controller of Pods that owns ConfigMaps and Secrets, in module My_Project.
func twoControllers(t *testing.T) manifests.Input {
	t.Helper()
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cw := in.Operator
	pods := description.Controller{Name: "pods", Deploy: cw.Deploy,
		Primary: description.Kind{Version: "v1", Kind: "Pod", Resource: "pods", GoPackage: "k8s.io/api/core/v1"},
		Owned: []description.Kind{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", GoPackage: "k8s.io/api/core/v1"},
			{Version: "v1", Kind: "Secret", Resource: "secrets", GoPackage: "k8s.io/api/core/v1"}},
		SourceRules: []description.Rule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}}}}
	in.Operators = []description.Controller{cw, pods}
	if in.Operator, err = manifests.Combine("My_Project", in.Operators); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestSeveralControllersOneSubscription: the same binary on the hub (the
// default) gets one Subscription for both controllers, to the one Service:
// the union of their kinds merged as the Knative wiring merges its sources
// (ConfigMaps in Resource mode, with neither an owner filter nor the
// ConfigWatcher's referencedBy, since the Pod controller owns them too;
// Secrets with the Pod owner filter), skipObserved only on the
// ConfigWatchers (the Pod controller does not skip), the Wakeups of both
// controllers, and the hub's read role covering both controllers' kinds and
// source rules.
func TestSeveralControllersOneSubscription(t *testing.T) {
	in := twoControllers(t)
	objs, err := manifests.Generate(in, manifests.Options{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	var subs []map[string]any
	var readRules string
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o.Obj}
		switch {
		case u.GetKind() == "Subscription":
			subs = append(subs, o.Obj)
		case u.GetKind() == "ApiServerSource" || u.GetKind() == "PingSource":
			t.Errorf("the hub wiring has a %s %s", u.GetKind(), u.GetName())
		case u.GetKind() == "ClusterRole" && u.GetName() == "opzero-hub:ns:my-project":
			readRules = fmt.Sprint(u.Object["rules"])
		}
	}
	if len(subs) != 1 {
		t.Fatalf("%d Subscriptions, want one for the binary", len(subs))
	}
	spec := subs[0]["spec"].(map[string]any)
	if spec["operator"] != "my-project" || fmt.Sprint(spec["operators"]) != "[configwatcher pods]" || spec["wakeups"] != true {
		t.Errorf("operator %v, operators %v, wakeups %v; want my-project, [configwatcher pods], true", spec["operator"], spec["operators"], spec["wakeups"])
	}
	if ref := spec["sink"].(map[string]any)["ref"].(map[string]any); ref["name"] != "my-project" {
		t.Errorf("sink %v, want the Service my-project", ref)
	}
	got := map[string]string{}
	for _, r := range spec["resources"].([]any) {
		m := r.(map[string]any)
		var owner string
		if o, ok := m["owner"].(map[string]any); ok {
			owner = fmt.Sprint(o["kind"])
		}
		_, ref := m["referencedBy"]
		_, skip := m["skipObserved"]
		got[fmt.Sprint(m["kind"])] = fmt.Sprintf("%v,%s,ref=%v,skip=%v", m["mode"], owner, ref, skip)
	}
	want := map[string]string{"ConfigWatcher": "Resource,,ref=false,skip=true", "ConfigMap": "Resource,,ref=false,skip=false",
		"Pod": "Resource,,ref=false,skip=false", "Secret": "Resource,Pod,ref=false,skip=false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("resources (kind: mode,owner,referencedBy,skipObserved)\n got %v\nwant %v", got, want)
	}
	for _, r := range []string{"configwatchers", "configmaps", "pods", "secrets", "deployments"} {
		if !strings.Contains(readRules, r) {
			t.Errorf("the hub's read role %s lacks %s", readRules, r)
		}
	}
}

// TestSharedReferrerKept: two controllers that watch ConfigMaps through the
// same field of the same primary keep the referencedBy filter; when one
// watches them without that promise, the filter goes (the hub must then
// send every ConfigMap change).
func TestSharedReferrerKept(t *testing.T) {
	in := twoControllers(t)
	cw := in.Operators[0]
	twin := cw
	twin.Name = "twin"
	for _, tc := range []struct {
		name    string
		watched []description.Kind
		ref     bool
	}{
		{"same promise", cw.Watched, true},
		{"no promise", []description.Kind{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", GoPackage: "k8s.io/api/core/v1"}}, false},
	} {
		twin.Watched = tc.watched
		in.Operators = []description.Controller{cw, twin}
		objs, err := manifests.Generate(in, manifests.Options{Namespace: "ns"})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Kind() != "Subscription" {
				continue
			}
			for _, r := range o.Obj["spec"].(map[string]any)["resources"].([]any) {
				m := r.(map[string]any)
				if m["kind"] != "ConfigMap" {
					continue
				}
				if _, ok := m["referencedBy"]; ok != tc.ref || m["mode"] != "Reference" {
					t.Errorf("%s: ConfigMaps %v; want Reference mode, referencedBy %v", tc.name, m, tc.ref)
				}
			}
		}
	}
}
