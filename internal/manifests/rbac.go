package manifests

import (
	"encoding/json"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The verbs each party needs (see doc.go for why each is there).
var (
	primaryVerbs   = []string{"get", "list", "watch", "update", "patch"}
	statusVerbs    = []string{"get", "update", "patch"}
	finalizerVerbs = []string{"update"}
	readVerbs      = []string{"get", "list", "watch"}
	eventVerbs     = []string{"create", "patch"}
	leaseVerbs     = []string{"get", "list", "create", "update", "delete"} // list: the sweep finds expired Leases
	wakeupVerbs    = []string{"get", "list", "create", "update", "delete"}
	// the wakeup source lists, watches and deletes Wakeups, and requests
	// tokens of its own service account.
	wakeupSourceVerbs = []string{"list", "watch", "delete"}
)

// rules collects policy rules, merging verbs per (group, resource, names).
type rules struct {
	m    map[[3]string]map[string]bool
	urls []rbacv1.PolicyRule
}

func (r *rules) add(group, resource string, verbs ...string) {
	r.addNamed(group, resource, "", verbs...)
}

func (r *rules) addNamed(group, resource, name string, verbs ...string) {
	if len(verbs) == 0 {
		return // a rule must name a verb
	}
	if r.m == nil {
		r.m = map[[3]string]map[string]bool{}
	}
	k := [3]string{group, resource, name}
	if r.m[k] == nil {
		r.m[k] = map[string]bool{}
	}
	for _, v := range verbs {
		r.m[k][v] = true
	}
}

// addRules merges rules read from markers.
func (r *rules) addRules(in []rbacv1.PolicyRule) {
	for _, pr := range in {
		if len(pr.NonResourceURLs) > 0 {
			r.urls = append(r.urls, pr)
			continue
		}
		names := pr.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range pr.APIGroups {
			for _, res := range pr.Resources {
				for _, n := range names {
					r.addNamed(g, res, n, pr.Verbs...)
				}
			}
		}
	}
}

// list returns the rules sorted by group, resource, name; verbs sorted.
func (r *rules) list() []rbacv1.PolicyRule {
	keys := make([][3]string, 0, len(r.m))
	for k := range r.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return strings.Join(keys[i][:], "\x00") < strings.Join(keys[j][:], "\x00") })
	var out []rbacv1.PolicyRule
	for _, k := range keys {
		pr := rbacv1.PolicyRule{APIGroups: []string{k[0]}, Resources: []string{k[1]}, Verbs: sortedKeys(r.m[k])}
		if k[2] != "" {
			pr.ResourceNames = []string{k[2]}
		}
		out = append(out, pr)
	}
	return append(out, r.urls...)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func rulesValue(rs []rbacv1.PolicyRule) []any {
	b, _ := json.Marshal(rs) // plain strings: cannot fail
	var out []any
	_ = json.Unmarshal(b, &out)
	return out
}

func serviceAccount(ns, name string, labels map[string]any) Object {
	return Object{File: FileRBAC, Obj: object("v1", "ServiceAccount", ns, name, labels)}
}

// clusterRole returns a ClusterRole and its binding to ns/sa.
func clusterRole(name, ns, sa string, rs []rbacv1.PolicyRule, labels map[string]any) []Object {
	role := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", name, labels)
	role["rules"] = rulesValue(rs)
	binding := object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", name, labels)
	binding["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
	binding["subjects"] = []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": ns}}
	return []Object{{File: FileRBAC, Obj: role}, {File: FileRBAC, Obj: binding}}
}

// role returns a Role in ns and its binding to ns/sa.
func role(name, ns, sa string, rs []rbacv1.PolicyRule, labels map[string]any) []Object {
	return roleFor(name, ns, ns, sa, rs, labels)
}

// roleFor returns a Role in ns and its binding to saNS/sa.
func roleFor(name, ns, saNS, sa string, rs []rbacv1.PolicyRule, labels map[string]any) []Object {
	r := object("rbac.authorization.k8s.io/v1", "Role", ns, name, labels)
	r["rules"] = rulesValue(rs)
	binding := object("rbac.authorization.k8s.io/v1", "RoleBinding", ns, name, labels)
	binding["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
	binding["subjects"] = []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": saNS}}
	return []Object{{File: FileRBAC, Obj: r}, {File: FileRBAC, Obj: binding}}
}
