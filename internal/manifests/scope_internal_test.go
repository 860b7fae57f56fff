package manifests

import (
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

func rule(group, resource string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
}

func ruleText(rs []rbacv1.PolicyRule) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s/%s:%s", r.APIGroups[0], r.Resources[0], strings.Join(r.Verbs, ",")))
	}
	return strings.Join(out, " ")
}

// TestScopeToProject: a verb the project grants only in some namespaces is
// granted there only; what it grants everywhere or nowhere, opzero's own
// grants and the reconciled kind stay cluster-wide; a Role naming no
// namespace stands for the operator's.
func TestScopeToProject(t *testing.T) {
	pr := &ProjectRole{File: "chart.yaml",
		Rules: []rbacv1.PolicyRule{rule("", "configmaps", "get", "list", "watch")},
		InNamespace: map[string][]rbacv1.PolicyRule{
			"trust": {rule("", "secrets", "get", "list", "watch"), rule("", "events", "create"), rule("x.io", "widgets", "get", "list")},
			"":      {rule("", "secrets", "get"), rule("", "configmaps", "patch")},
		}}
	generated := []rbacv1.PolicyRule{
		rule("", "configmaps", "get", "list", "patch", "watch"),
		rule("", "events", "create", "patch"),
		rule("", "nodes", "get"),
		rule("", "secrets", "get", "list", "watch"),
		rule("x.io", "widgets", "get", "list", "update"),
		rule("x.io", "widgets/status", "update"),
	}
	cluster, byNS, narrowed := scopeToProject(generated, pr, "op-system", map[[2]string]bool{{"x.io", "widgets"}: true})
	if got, want := ruleText(cluster), "/configmaps:get,list,watch /events:create,patch /nodes:get x.io/widgets:get,list,update x.io/widgets/status:update"; got != want {
		t.Errorf("cluster-wide %s\nwant         %s", got, want)
	}
	for ns, want := range map[string]string{"op-system": "/configmaps:patch /secrets:get", "trust": "/secrets:get,list,watch"} {
		if got := ruleText(byNS[ns]); got != want {
			t.Errorf("in %s: %s, want %s", ns, got, want)
		}
	}
	if len(byNS) != 2 {
		t.Errorf("namespaces %v, want op-system and trust", byNS)
	}
	if got := strings.Join(narrowed, "; "); got != "patch configmaps in namespace op-system; get secrets in namespace op-system; get,list,watch secrets in namespace trust" {
		t.Errorf("narrowed: %s", got)
	}

	for name, pr := range map[string]*ProjectRole{"no project role": nil, "unreadable": {Err: fmt.Errorf("bad")}, "cluster-wide only": {Rules: pr.Rules}} {
		cluster, byNS, narrowed := scopeToProject(generated, pr, "op-system", nil)
		if ruleText(cluster) != ruleText(generated) || byNS != nil || narrowed != nil {
			t.Errorf("%s: %s %v %v, want the generated rules unchanged", name, ruleText(cluster), byNS, narrowed)
		}
	}
}

// TestRenderedRoleScopes: a ClusterRole bound by a ClusterRoleBinding grants
// everywhere, one bound by a RoleBinding and a Role in their namespace
// only; roles bound to no Deployment's service account are not its.
func TestRenderedRoleScopes(t *testing.T) {
	files := map[string][]byte{"chart.yaml": []byte(`---
apiVersion: apps/v1
kind: Deployment
metadata: {name: op, namespace: op-system}
spec: {template: {spec: {serviceAccountName: op}}}
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: everywhere}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: everywhere}
roleRef: {kind: ClusterRole, name: everywhere}
subjects: [{kind: ServiceAccount, name: op, namespace: op-system}]
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: reader}
rules: [{apiGroups: [""], resources: [secrets], verbs: [list]}]
---
kind: RoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: reader, namespace: trust}
roleRef: {kind: ClusterRole, name: reader}
subjects: [{kind: ServiceAccount, name: op, namespace: op-system}]
---
kind: Role
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: own, namespace: op-system}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get]}]
---
kind: RoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: own, namespace: op-system}
roleRef: {kind: Role, name: own}
subjects: [{kind: ServiceAccount, name: op}]
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: users}
rules: [{apiGroups: [""], resources: [pods], verbs: [delete]}]
`)}
	pr := renderedRole(files)
	if pr.Err != nil {
		t.Fatal(pr.Err)
	}
	if got := ruleText(pr.Rules); got != "/configmaps:get" {
		t.Errorf("everywhere: %s, want /configmaps:get", got)
	}
	if got := ruleText(pr.InNamespace["trust"]); got != "/secrets:list" {
		t.Errorf("in trust: %s, want /secrets:list", got)
	}
	if got := ruleText(pr.InNamespace["op-system"]); got != "/secrets:get" {
		t.Errorf("in op-system: %s, want /secrets:get", got)
	}
	if len(pr.InNamespace) != 2 {
		t.Errorf("namespaces %v, want trust and op-system", pr.InNamespace)
	}
	if got := ruleText(pr.all()); got != "/configmaps:get /secrets:get /secrets:list" {
		t.Errorf("all: %s", got)
	}
}
