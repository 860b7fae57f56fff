package manifests

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// rbacMarker is a +kubebuilder:rbac marker line.
var rbacMarker = regexp.MustCompile(`^\s*//\s*\+kubebuilder:rbac:`)

// ProjectRole is a project's own generated role (config/rbac/role.yaml).
type ProjectRole struct {
	File  string // relative to the operator's folder
	Rules []rbacv1.PolicyRule
	// Err, if set, is why the file could not be read: a warning, not a
	// failure (the generated role does not depend on it).
	Err error
}

// projectRoleFile is where kubebuilder's make manifests writes the role.
const projectRoleFile = "config/rbac/role.yaml"

// ReadProjectRole reads root's config/rbac/role.yaml: the ClusterRole
// (and Roles) controller-gen wrote from the project's markers; nil when
// there is none.
func ReadProjectRole(root, dir string) *ProjectRole {
	path := filepath.Join(root, projectRoleFile)
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	pr := &ProjectRole{File: relTo(dir, path)}
	if err != nil {
		pr.Err = err
		return pr
	}
	err = eachObject(map[string][]byte{pr.File: b}, func(name, kind string, raw []byte) error {
		switch kind {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole // a Role's rules read the same
			if err := json.Unmarshal(raw, &r); err != nil {
				return err
			}
			pr.Rules = append(pr.Rules, r.Rules...)
		case "":
			return fmt.Errorf("an object without kind")
		}
		return nil
	})
	if err != nil {
		pr.Err = err
	}
	return pr
}

// roleGaps lists what the project's role grants and the generated rules
// do not: "verb resource.group" (with the names a rule is limited to).
func roleGaps(project, generated []rbacv1.PolicyRule) []string {
	var gaps []string
	for _, pr := range project {
		if len(pr.NonResourceURLs) > 0 {
			continue
		}
		for _, g := range pr.APIGroups {
			for _, res := range pr.Resources {
				var missing []string
				for _, v := range pr.Verbs {
					if !grants(generated, g, res, v, pr.ResourceNames) {
						missing = append(missing, v)
					}
				}
				if len(missing) == 0 {
					continue
				}
				what := res
				if g != "" {
					what += "." + g
				}
				if len(pr.ResourceNames) > 0 {
					what += " (" + strings.Join(pr.ResourceNames, ", ") + ")"
				}
				gaps = append(gaps, strings.Join(missing, ",")+" "+what)
			}
		}
	}
	slices.Sort(gaps)
	return slices.Compact(gaps)
}

// grants says whether rules allow verb on group/resource, for every one
// of names (none: any name).
func grants(rules []rbacv1.PolicyRule, group, resource, verb string, names []string) bool {
	for _, r := range rules {
		if !has(r.APIGroups, group) || !has(r.Resources, resource) || !has(r.Verbs, verb) {
			continue
		}
		if len(r.ResourceNames) == 0 {
			return true
		}
		if len(names) > 0 && !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(r.ResourceNames, n) }) {
			return true
		}
	}
	return false
}

func has(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }

// WarnRoleGaps writes a warning for each rule of the project's own role
// the generated ClusterRole lacks, or why the role could not be read.
func WarnRoleGaps(w io.Writer, name string, pr *ProjectRole, generated []rbacv1.PolicyRule) {
	if w == nil || pr == nil {
		return
	}
	if pr.Err != nil {
		fmt.Fprintf(w, "warning: %s: the project's %s could not be read (%v): its rules were not compared with the generated role; "+
			"regenerate it with the project's make manifests, or delete it\n", name, pr.File, pr.Err)
		return
	}
	for _, gap := range roleGaps(pr.Rules, generated) {
		fmt.Fprintf(w, "warning: %s: the project's %s grants %s, which the generated ClusterRole does not (no +kubebuilder:rbac marker for it in a package the binary is built from): "+
			"the operator would be refused it; add the +kubebuilder:rbac marker to a package the binary is built from\n", name, pr.File, gap)
	}
}

// joinRoles is the project's role from config/rbac and from its rendered
// manifests together (either may be nil).
func joinRoles(a, b *ProjectRole) *ProjectRole {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.Err != nil:
		return a
	case b.Err != nil:
		return b
	}
	return &ProjectRole{File: a.File + " and " + b.File, Rules: append(slices.Clone(a.Rules), b.Rules...)}
}
