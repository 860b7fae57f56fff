package manifests

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
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
	File string // relative to the operator's folder
	// Rules are granted in every namespace (a ClusterRole bound by a
	// ClusterRoleBinding).
	Rules []rbacv1.PolicyRule
	// InNamespace are granted in one namespace only (a Role, or a
	// ClusterRole bound by a RoleBinding there), by namespace; "" is the
	// operator's own (a Role that names none, as kustomize places it).
	InNamespace map[string][]rbacv1.PolicyRule
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
			var r rbacv1.Role // a ClusterRole's rules and metadata read the same
			if err := json.Unmarshal(raw, &r); err != nil {
				return err
			}
			if kind == "Role" {
				pr.grantIn(r.Namespace, r.Rules)
			} else {
				pr.Rules = append(pr.Rules, r.Rules...)
			}
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
	for _, gap := range roleGaps(pr.all(), generated) {
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
	j := &ProjectRole{File: a.File + " and " + b.File, Rules: append(slices.Clone(a.Rules), b.Rules...)}
	for _, pr := range []*ProjectRole{a, b} {
		for ns, rs := range pr.InNamespace {
			j.grantIn(ns, rs)
		}
	}
	return j
}

// grantIn adds rules granted in namespace ns only.
func (pr *ProjectRole) grantIn(ns string, rs []rbacv1.PolicyRule) {
	if pr.InNamespace == nil {
		pr.InNamespace = map[string][]rbacv1.PolicyRule{}
	}
	pr.InNamespace[ns] = append(pr.InNamespace[ns], rs...)
}

// all are the rules the project grants anywhere.
func (pr *ProjectRole) all() []rbacv1.PolicyRule {
	out := slices.Clone(pr.Rules)
	for _, ns := range slices.Sorted(maps.Keys(pr.InNamespace)) {
		out = append(out, pr.InNamespace[ns]...)
	}
	return out
}

// ownGrants are opzero's own needs, granted in every namespace whatever the
// project's role says: Events on the objects it reconciles, Wakeups,
// TokenReviews of deliveries, Leases.
var ownGrants = map[[2]string]bool{{"", "events"}: true, {"events.k8s.io", "events"}: true, {"opzero.dev", "wakeups"}: true,
	{"authentication.k8s.io", "tokenreviews"}: true, {"coordination.k8s.io", "leases"}: true}

// scopeToProject narrows the generated rules to the project's own scope: a
// verb on a resource the project's roles grant in some namespaces only
// (InNamespace), never in every one, is granted in those namespaces (a Role
// in each, byNS) instead of by the ClusterRole, as the project's own
// deployment grants it. Everything else stays cluster-wide (cluster):
// what the project's roles grant everywhere or nowhere (roleGaps' warning
// is the other way round), opzero's own grants (ownGrants) and the kinds
// in keep (the reconciled kinds, which sweeps list in every namespace).
// narrowed says, one line a resource, what moved where. ownNS stands for a
// project Role that names no namespace.
func scopeToProject(generated []rbacv1.PolicyRule, pr *ProjectRole, ownNS string, keep map[[2]string]bool) (cluster []rbacv1.PolicyRule, byNS map[string][]rbacv1.PolicyRule, narrowed []string) {
	if pr == nil || pr.Err != nil || len(pr.InNamespace) == 0 {
		return generated, nil, nil
	}
	in := map[string][]rbacv1.PolicyRule{}
	for ns, rs := range pr.InNamespace {
		in[cmp.Or(ns, ownNS)] = append(in[cmp.Or(ns, ownNS)], rs...)
	}
	nss := slices.Sorted(maps.Keys(in))
	for _, r := range generated {
		if len(r.NonResourceURLs) > 0 || len(r.APIGroups) != 1 || len(r.Resources) != 1 {
			cluster = append(cluster, r)
			continue
		}
		g, res := r.APIGroups[0], r.Resources[0]
		base, _, _ := strings.Cut(res, "/")
		if ownGrants[[2]string{g, base}] || keep[[2]string{g, base}] {
			cluster = append(cluster, r)
			continue
		}
		var everywhere []string
		scoped := map[string][]string{} // verbs by namespace
		for _, v := range r.Verbs {
			if grants(pr.Rules, g, res, v, r.ResourceNames) {
				everywhere = append(everywhere, v)
				continue
			}
			var where []string
			for _, ns := range nss {
				if grants(in[ns], g, res, v, r.ResourceNames) {
					where = append(where, ns)
				}
			}
			if len(where) == 0 {
				everywhere = append(everywhere, v)
			}
			for _, ns := range where {
				scoped[ns] = append(scoped[ns], v)
			}
		}
		if len(everywhere) > 0 {
			c := r
			c.Verbs = everywhere
			cluster = append(cluster, c)
		}
		for _, ns := range slices.Sorted(maps.Keys(scoped)) {
			if byNS == nil {
				byNS = map[string][]rbacv1.PolicyRule{}
			}
			n := r
			n.Verbs = scoped[ns]
			byNS[ns] = append(byNS[ns], n)
			what := res
			if g != "" {
				what += "." + g
			}
			narrowed = append(narrowed, fmt.Sprintf("%s %s in namespace %s", strings.Join(scoped[ns], ","), what, ns))
		}
	}
	return cluster, byNS, narrowed
}
