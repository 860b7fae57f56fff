package manifests

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// readProjectManifests reads the files a project deploys from outside its
// config/ (Options.ProjectManifests: a rendered Helm chart, a release
// YAML), keyed by their path relative to dir. A file that cannot be read
// is an error naming it.
func readProjectManifests(dir string, files []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--project-manifests %s: %w", f, err)
		}
		out[relTo(dir, f)] = b
	}
	return out, eachObject(out, func(string, string, []byte) error { return nil })
}

// renderedRole is the role a project's rendered manifests give its
// operator: the rules of the Roles and ClusterRoles bound to the service
// account of their Deployments (all of them when the files hold no
// Deployment, or none bound to one): a chart's roles for its users
// (aggregated edit/view roles) are not the operator's. nil without files.
func renderedRole(files map[string][]byte) *ProjectRole {
	if len(files) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(files))
	pr := &ProjectRole{File: names[0]}
	if len(names) > 1 {
		pr.File = fmt.Sprintf("%s (and %d more)", names[0], len(names)-1)
	}
	type roleRef struct{ kind, ns, name string }
	roles := map[roleRef][]rbacv1.PolicyRule{}
	accounts := map[string]bool{}          // namespace/name of the Deployments' service accounts
	bound := map[roleRef]map[string]bool{} // where each is bound to one: a namespace, "" every one
	type binding struct {
		ref      roleRef
		subjects []rbacv1.Subject
		ns       string
		scope    string // where it grants: its namespace, "" every one (a ClusterRoleBinding)
	}
	var bindings []binding
	err := eachObject(files, func(file, kind string, raw []byte) error {
		switch kind {
		case "ClusterRole", "Role":
			var r rbacv1.Role // a ClusterRole's rules and metadata read the same
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			ns := r.Namespace
			if kind == "ClusterRole" {
				ns = ""
			}
			roles[roleRef{kind, ns, r.Name}] = append(roles[roleRef{kind, ns, r.Name}], r.Rules...)
		case "Deployment":
			var d appsv1.Deployment
			if err := json.Unmarshal(raw, &d); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			accounts[d.Namespace+"/"+cmp.Or(d.Spec.Template.Spec.ServiceAccountName, "default")] = true
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := json.Unmarshal(raw, &b); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			ref := roleRef{b.RoleRef.Kind, "", b.RoleRef.Name}
			if b.RoleRef.Kind == "Role" {
				ref.ns = b.Namespace
			}
			scope := b.Namespace
			if kind == "ClusterRoleBinding" {
				scope = ""
			}
			bindings = append(bindings, binding{ref: ref, subjects: b.Subjects, ns: b.Namespace, scope: scope})
		}
		return nil
	})
	if err != nil {
		pr.Err = err
		return pr
	}
	for _, b := range bindings {
		for _, s := range b.subjects {
			if s.Kind == "ServiceAccount" && (accounts[s.Namespace+"/"+s.Name] || accounts[b.ns+"/"+s.Name] && s.Namespace == "") {
				if bound[b.ref] == nil {
					bound[b.ref] = map[string]bool{}
				}
				bound[b.ref][b.scope] = true
			}
		}
	}
	for _, ref := range slices.SortedFunc(maps.Keys(roles), func(a, b roleRef) int {
		return strings.Compare(a.kind+"/"+a.ns+"/"+a.name, b.kind+"/"+b.ns+"/"+b.name)
	}) {
		where := bound[ref]
		if len(bound) == 0 { // none bound to its Deployments: every role, where it is
			where = map[string]bool{ref.ns: true}
		}
		for _, ns := range slices.Sorted(maps.Keys(where)) {
			if ns == "" {
				pr.Rules = append(pr.Rules, roles[ref]...)
			} else {
				pr.grantIn(ns, roles[ref])
			}
		}
	}
	return pr
}
