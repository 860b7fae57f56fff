package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/controllergen"
)

// GeneratedCRD is one CRD as controller-gen would write it.
type GeneratedCRD struct {
	// File is controller-gen's file name (<group>_<plural>.yaml).
	File string
	// YAML is the file's bytes, exactly as `controller-gen crd` writes them.
	YAML []byte
	CRD  apiextv1.CustomResourceDefinition
	// From is the project's file it was read from (ProjectCRDs), "" for
	// one controller-gen generated.
	From string
}

// GenerateCRDs runs `controller-gen crd:crdVersions=v1` on the Go packages
// pkgs, resolved in dir.
func GenerateCRDs(dir string, pkgs ...string) ([]GeneratedCRD, error) {
	return GenerateCRDsWith(dir, "", pkgs...)
}

// GenerateCRDsWith is GenerateCRDs with the crd generator's options of a
// project (ProjectCRDOptions: "maxDescLen=0", ...); crdVersions is v1
// unless they say otherwise.
func GenerateCRDsWith(dir, options string, pkgs ...string) ([]GeneratedCRD, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	gen := "crd:crdVersions=v1"
	if options != "" {
		gen = "crd:" + options
		if !strings.Contains(options, "crdVersions=") {
			gen += ",crdVersions=v1"
		}
	}
	files, err := controllergen.Generate(context.Background(), dir, gen, pkgs...)
	if err != nil {
		return nil, fmt.Errorf("generating CRDs from %s: %w", strings.Join(pkgs, ", "), err)
	}
	var out []GeneratedCRD
	for name, b := range files {
		g := GeneratedCRD{File: name, YAML: b}
		if err := yaml.Unmarshal(bytes.TrimPrefix(b, []byte("---\n")), &g.CRD); err != nil {
			return nil, fmt.Errorf("reading generated %s: %w", name, err)
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// MarkerRules returns the rules of the +kubebuilder:rbac markers in the Go
// packages pkgs (the reconciler's), as `controller-gen rbac` reads them,
// merged and sorted. Markers with a namespace are rejected: the operator
// is cluster-wide.
func MarkerRules(dir string, pkgs ...string) ([]rbacv1.PolicyRule, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	files, err := controllergen.Generate(context.Background(), dir, "rbac:roleName=markers", pkgs...)
	if err != nil {
		return nil, fmt.Errorf("reading +kubebuilder:rbac markers in %s: %w", strings.Join(pkgs, ", "), err)
	}
	var rules []rbacv1.PolicyRule
	// role.yaml: a ClusterRole, then a Role per namespace; no file without markers
	err = eachObject(files, func(name, kind string, raw []byte) error {
		switch kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("reading the generated %s: %w", name, err)
			}
			rules = append(rules, r.Rules...)
		case "Role":
			var r rbacv1.Role
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("reading the generated %s: %w", name, err)
			}
			return fmt.Errorf("+kubebuilder:rbac marker with namespace=%s in %s: opzero operators are cluster-wide; drop the namespace", r.Namespace, strings.Join(pkgs, ", "))
		}
		return nil
	})
	return rules, err
}

// eachObject calls fn with each object of the YAML files, in file name
// order, as JSON.
func eachObject(files map[string][]byte, fn func(file, kind string, raw []byte) error) error {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(files[name]), 4096)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("reading the generated %s: %w", name, err)
			}
			if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" { // a document of comments only
				continue
			}
			var head struct{ Kind string }
			if err := json.Unmarshal(raw, &head); err != nil {
				return fmt.Errorf("reading the generated %s: %w", name, err)
			}
			if err := fn(name, head.Kind, raw); err != nil {
				return err
			}
		}
	}
	return nil
}
