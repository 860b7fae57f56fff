package manifests_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/knative"
)

// TestKnativeFieldsAreDeclared: every field of every generated Knative
// object is declared in the real Knative CRD's schema, even where the CRD
// preserves unknown fields (an ApiServerSource's spec, a Service's template),
// where the API server would silently keep a misspelt field.
func TestKnativeFieldsAreDeclared(t *testing.T) {
	paths, err := knative.CRDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*apiextv1.JSONSchemaProps{} // apiVersion/kind
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				schemas[crd.Spec.Group+"/"+v.Name+"/"+crd.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
			}
		}
	}
	checked := 0
	for name, o := range goldenCases {
		for _, obj := range generateCase(t, name, o) {
			u, err := unstructuredOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			s := schemas[u.GetAPIVersion()+"/"+u.GetKind()]
			if s == nil {
				continue // not a Knative kind
			}
			checked++
			for _, e := range undeclared("", u.Object["spec"], s.Properties["spec"]) {
				t.Errorf("%s: %s %s: %s", name, u.GetKind(), u.GetName(), e)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no Knative object checked")
	}
	// Not vacuous: a misspelt field is found.
	bad := map[string]any{"mode": "Resource", "serviceAcountName": "typo"}
	if errs := undeclared("", bad, schemas["sources.knative.dev/v1/ApiServerSource"].Properties["spec"]); len(errs) != 1 {
		t.Errorf("a misspelt serviceAccountName: got %v, want one error", errs)
	}
}

// undeclared lists the fields of v that schema s does not declare. Where s
// declares no properties (free-form maps, preserved unknown fields without
// a declared shape) anything goes.
func undeclared(path string, v any, s apiextv1.JSONSchemaProps) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := path + "." + k
			if ps, ok := s.Properties[k]; ok {
				out = append(out, undeclared(p, v[k], ps)...)
			} else if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
				out = append(out, undeclared(p, v[k], *s.AdditionalProperties.Schema)...)
			} else if len(s.Properties) > 0 {
				out = append(out, fmt.Sprintf("spec%s is not declared (declared: %s)", p, strings.Join(propNames(s), ", ")))
			}
		}
	case []any:
		if s.Items != nil && s.Items.Schema != nil {
			for i, e := range v {
				out = append(out, undeclared(fmt.Sprintf("%s[%d]", path, i), e, *s.Items.Schema)...)
			}
		}
	}
	return out
}

func propNames(s apiextv1.JSONSchemaProps) []string {
	var out []string
	for k := range s.Properties {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
