package manifests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-tools/pkg/crd"
	"sigs.k8s.io/controller-tools/pkg/genall"
	"sigs.k8s.io/controller-tools/pkg/loader"
	"sigs.k8s.io/controller-tools/pkg/rbac"
	"sigs.k8s.io/yaml"
)

// GeneratedCRD is one CRD as controller-gen would write it.
type GeneratedCRD struct {
	// File is controller-gen's file name (<group>_<plural>.yaml).
	File string
	// YAML is the file's bytes, exactly as `controller-gen crd` writes them.
	YAML []byte
	CRD  apiextv1.CustomResourceDefinition
}

// GenerateCRDs runs controller-tools' CRD generator (crdVersions=v1, the
// defaults of `controller-gen crd`) on the Go packages pkgs, resolved in dir.
func GenerateCRDs(dir string, pkgs ...string) ([]GeneratedCRD, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	var gen genall.Generator = &crd.Generator{}
	files, err := runGenerator(dir, gen, pkgs)
	if err != nil {
		return nil, fmt.Errorf("generating CRDs from %s: %w", strings.Join(pkgs, ", "), err)
	}
	var out []GeneratedCRD
	for name, b := range files {
		g := GeneratedCRD{File: name, YAML: stampVersion(dir, b)}
		if err := yaml.Unmarshal(bytes.TrimPrefix(b, []byte("---\n")), &g.CRD); err != nil {
			return nil, fmt.Errorf("reading generated %s: %w", name, err)
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// MarkerRules returns the rules of the +kubebuilder:rbac markers in the Go
// packages pkgs (the reconciler's), as controller-gen's rbac generator reads
// them, merged and sorted. Markers with a namespace are rejected: the
// operator is cluster-wide.
func MarkerRules(dir string, pkgs ...string) ([]rbacv1.PolicyRule, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	var gen genall.Generator = rbac.Generator{}
	rt, err := genall.Generators{&gen}.ForRootsWithConfig(&packages.Config{Dir: dir}, pkgs...)
	if err != nil {
		return nil, fmt.Errorf("loading %s for +kubebuilder:rbac markers: %w", strings.Join(pkgs, ", "), err)
	}
	if err := loadErrors(rt.Roots); err != nil {
		return nil, err
	}
	objs, err := rbac.GenerateRoles(&rt.GenerationContext, "markers")
	if err != nil {
		return nil, fmt.Errorf("reading +kubebuilder:rbac markers in %s: %w", strings.Join(pkgs, ", "), err)
	}
	var rules []rbacv1.PolicyRule
	for _, o := range objs {
		switch r := o.(type) {
		case rbacv1.ClusterRole:
			rules = append(rules, r.Rules...)
		case rbacv1.Role:
			return nil, fmt.Errorf("+kubebuilder:rbac marker with namespace=%s in %s: opzero operators are cluster-wide; drop the namespace", r.Namespace, strings.Join(pkgs, ", "))
		}
	}
	return rules, nil
}

func runGenerator(dir string, gen genall.Generator, pkgs []string) (map[string][]byte, error) {
	rt, err := genall.Generators{&gen}.ForRootsWithConfig(&packages.Config{Dir: dir}, pkgs...)
	if err != nil {
		return nil, err
	}
	if err := loadErrors(rt.Roots); err != nil {
		return nil, err
	}
	mem := memOutput{}
	rt.OutputRules = genall.OutputRules{Default: mem}
	var errs bytes.Buffer
	rt.ErrorWriter = &errs
	if rt.Run() {
		return nil, fmt.Errorf("controller-tools reported errors:\n%s", tail(errs.String()))
	}
	return mem, nil
}

func loadErrors(roots []*loader.Package) error {
	var msgs []string
	for _, p := range roots {
		for _, e := range p.Errors {
			if e.Kind != packages.TypeError {
				msgs = append(msgs, e.Error())
			}
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("loading Go packages: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// memOutput is a genall.OutputRule that keeps artifacts in memory.
type memOutput map[string][]byte

func (m memOutput) Open(_ *loader.Package, path string) (io.WriteCloser, error) {
	return &memFile{m: m, path: path}, nil
}

type memFile struct {
	bytes.Buffer
	m    memOutput
	path string
}

func (f *memFile) Close() error { f.m[f.path] = f.Bytes(); return nil }

var versionAnnotation = regexp.MustCompile(`(?m)^(\s+controller-gen\.kubebuilder\.io/version: ).*$`)

// stampVersion writes controller-tools' module version into the CRD's
// controller-gen.kubebuilder.io/version annotation, as controller-gen (whose
// main module it is) does; as a library it would stamp opzero's version.
func stampVersion(dir string, b []byte) []byte {
	v := controllerToolsVersion()
	if v == "" { // test binaries carry no dependency versions: ask go
		out, _ := goCmd(context.Background(), dir, "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/controller-tools")
		v = strings.TrimSpace(out)
	}
	if v == "" {
		return b
	}
	return versionAnnotation.ReplaceAll(b, []byte("${1}"+v))
}

func controllerToolsVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range info.Deps {
		if d.Path == "sigs.k8s.io/controller-tools" {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}
