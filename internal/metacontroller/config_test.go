package metacontroller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
)

func TestLoadFilesResolvesTheExamples(t *testing.T) {
	cfg, err := LoadFiles([]string{"../../examples/metacontroller/helloworld", "../../examples/metacontroller/service-per-pod"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Controllers) != 2 {
		t.Fatalf("%d controllers, want 2", len(cfg.Controllers))
	}
	hello, spp := cfg.Controllers[0], cfg.Controllers[1]
	if hello.Name != "hello-controller" || hello.Parents[0].GVK.Kind != "HelloWorld" || !hello.Parents[0].Namespaced ||
		len(hello.Children) != 2 || hello.Children[0].GVK.Kind != "Pod" || hello.Children[0].Method != "Recreate" ||
		hello.Children[1].GVK.Kind != "ConfigMap" || hello.Children[1].Method != "InPlace" || hello.ResyncPeriodSeconds != 3600 {
		t.Fatalf("hello-controller resolved as %+v", hello)
	}
	if spp.Kind != "DecoratorController" || spp.Parents[0].GVK.Kind != "StatefulSet" || spp.Children[0].GVK.Kind != "Service" ||
		spp.Children[0].Method != "OnDelete" || spp.Finalizer() != "metacontroller.io/decoratorcontroller-service-per-pod" {
		t.Fatalf("service-per-pod resolved as %+v", spp)
	}
	kinds := map[string]int{}
	for _, k := range cfg.kinds() {
		kinds[k.gvk.Kind] = len(k.parents) + len(k.childOf)
	}
	if len(kinds) != 5 {
		t.Fatalf("watched kinds %v, want HelloWorld, Pod, ConfigMap, StatefulSet, Service once each", kinds)
	}
}

func TestLoadFilesRefusesAnUnknownResource(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/c.yaml", `apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: x}
spec:
  parentResource: {apiVersion: example.com/v1, resource: nothings}
  hooks: {sync: {webhook: {url: "http://h/sync"}}}
`)
	_, err := LoadFiles([]string{dir})
	if err == nil || !strings.Contains(err.Error(), "nothings") || !strings.Contains(err.Error(), "CRD") {
		t.Fatalf("want an error naming the resource and the CRD, got %v", err)
	}
}

func TestDesiredChildrenRefusesBadAnswersWhole(t *testing.T) {
	cfg, err := LoadFiles([]string{"../../examples/metacontroller/helloworld"})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Controllers[0]
	parent := obj("example.com/v1", "HelloWorld", "ns", "p")
	good := obj("v1", "ConfigMap", "", "p")
	for name, children := range map[string][]*unstructured.Unstructured{
		"unmanaged kind":  {good, obj("v1", "Secret", "", "s")},
		"no name":         {obj("v1", "ConfigMap", "", "")},
		"other namespace": {obj("v1", "ConfigMap", "elsewhere", "p")},
		"twice":           {good, obj("v1", "ConfigMap", "ns", "p")},
		"null":            {good, nil},
	} {
		if _, err := desiredChildren(c, parent, children); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	d, err := desiredChildren(c, parent, []*unstructured.Unstructured{good})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range d {
		if o.GetNamespace() != "ns" || len(o.GetOwnerReferences()) != 1 || !*o.GetOwnerReferences()[0].Controller {
			t.Fatalf("child not completed: %v", o.Object)
		}
	}
}

func obj(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// TestLoadFilesResolvesBuiltinKindsOffline: a DecoratorController of
// CustomResourceDefinitions (apiextensions) and APIServices
// (apiregistration) resolves from files alone, as `opzero manifests` needs.
func TestLoadFilesResolvesBuiltinKindsOffline(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/d.yaml", `apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: crds}
spec:
  resources:
  - {apiVersion: apiextensions.k8s.io/v1, resource: customresourcedefinitions}
  - {apiVersion: apiregistration.k8s.io/v1, resource: apiservices}
  - {apiVersion: v1, resource: events}
  attachments:
  - {apiVersion: v1, resource: configmaps}
  hooks: {sync: {webhook: {url: "http://h/sync"}}}
`)
	cfg, err := LoadFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	ps := cfg.Controllers[0].Parents
	if ps[0].GVK.Kind != "CustomResourceDefinition" || ps[0].Namespaced || ps[1].GVK.Kind != "APIService" || ps[1].Namespaced ||
		ps[2].GVK.Group != "" || ps[2].GVK.Kind != "Event" || !ps[2].Namespaced {
		t.Fatalf("resolved as %+v", ps)
	}
}

// TestRelatedRBACAsMetacontroller: a controller with a customize hook and
// no annotation lets the operator (and the hub) read every resource, with a
// warning saying why and how to narrow it; with the annotation the grant
// is the resources it names.
func TestRelatedRBACAsMetacontroller(t *testing.T) {
	controller := func(ann string) string {
		return `apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata:
  name: propagation
` + ann + `spec:
  parentResource: {apiVersion: v1, resource: configmaps}
  childResources: [{apiVersion: v1, resource: secrets}]
  hooks:
    sync: {webhook: {url: "http://hook.ns/sync"}}
    customize: {webhook: {url: "http://hook.ns/customize"}}
`
	}
	readsAll := func(rules []description.Rule) bool {
		for _, r := range rules {
			if len(r.APIGroups) == 1 && r.APIGroups[0] == "*" && len(r.Resources) == 1 && r.Resources[0] == "*" {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name, ann string
		all       bool
	}{
		{"no annotation", "", true},
		{"annotation", "  annotations: {opzero.dev/related-resources: v1/namespaces}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir+"/c.yaml", controller(tc.ann))
			cfg, err := LoadFiles([]string{dir})
			if err != nil {
				t.Fatal(err)
			}
			d := &description.Controller{}
			completeDescription(d, cfg)
			if readsAll(d.Rules) != tc.all || readsAll(d.SourceRules) != tc.all {
				t.Fatalf("read on every resource: operator %v, sources %v; want %v", readsAll(d.Rules), readsAll(d.SourceRules), tc.all)
			}
			warned := false
			for _, w := range d.Warnings {
				warned = warned || strings.Contains(w, "every resource") && strings.Contains(w, RelatedAnnotation)
			}
			if warned != tc.all {
				t.Fatalf("warnings %q: a warning about reading every resource: %v, want %v", d.Warnings, warned, tc.all)
			}
		})
	}
}
