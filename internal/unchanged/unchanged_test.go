package unchanged

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// A release as operators publish them: a Deployment, its service account's
// ClusterRole (what it reconciles) and leader-election Role, a CRD.
const release = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets}
  versions:
  - name: v1beta1
    served: true
    storage: false
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        properties:
          status:
            properties:
              observedGeneration: {type: integer}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-manager}
rules:
- apiGroups: [example.com]
  resources: [widgets, widgets/status]
  verbs: [get, list, watch, update]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [widget-token]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch, list, watch]
- apiGroups: [""]
  resources: [services]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: widget-manager}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: widget-manager}
subjects: [{kind: ServiceAccount, name: widget, namespace: widget-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: widget-leader-election-role, namespace: widget-system}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: widget-leader-election, namespace: widget-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-leader-election-role}
subjects: [{kind: ServiceAccount, name: widget}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: widget-config, namespace: tenants}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: widget-config, namespace: tenants}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-config}
subjects: [{kind: ServiceAccount, name: widget, namespace: widget-system}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: widget-controller, namespace: widget-system}
spec:
  template:
    spec:
      serviceAccountName: widget
      containers:
      - name: manager
        args: [--leader-elect, --metrics-bind-address=:8443, --health-probe-bind-address=:8081]
`

func objects(t *testing.T, docs string) []obj {
	t.Helper()
	var out []obj
	for _, d := range strings.Split(docs, "\n---\n") {
		var o obj
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatal(err)
		}
		if len(o) > 0 {
			out = append(out, o)
		}
	}
	return out
}

func opts() Options {
	return Options{HubNamespace: "opzero-system", HubName: "opzero-hub", AggregateLabel: "opzero.dev/aggregate-to-hub"}
}

func TestDerive(t *testing.T) {
	o := opts()
	o.Owners = map[string]string{"Deployment": "Widget"}
	r, err := Derive(objects(t, release), o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := yaml.Marshal(r.Objects[0]["spec"])
	if err != nil {
		t.Fatal(err)
	}
	want := `operator: widget-controller
resources:
- apiVersion: example.com/v1
  kind: Widget
  mode: Resource
  skipObserved: {}
- apiVersion: apps/v1
  kind: Deployment
  mode: Reference
  owner:
    apiVersion: example.com/v1
    kind: Widget
- apiVersion: v1
  kind: ConfigMap
  mode: Reference
  namespaces:
  - tenants
scaleToZero:
  metrics:
    port: 8443
    scheme: https
serviceAccountName: widget
sink:
  ref:
    apiVersion: apps/v1
    kind: Deployment
    name: widget-controller
`
	if string(got) != want {
		t.Errorf("spec:\n%s\nwant:\n%s", got, want)
	}
	notes := ""
	for _, n := range r.Notes {
		notes += "[" + n.Sure + "] " + n.Text + "\n"
	}
	for _, w := range []string{"[left out] configmaps from Role widget-system/widget-leader-election-role",
		"[left out] leases.coordination.k8s.io", "[left out] events from ClusterRole widget-manager",
		"[likely] Widget (its CRD, in every namespace)", "[certain] Deployment: only those whose controller owner is a Widget wake it"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
	// the hub may read what is subscribed, and scale only this Deployment
	role, _ := yaml.Marshal(r.Objects[1]["rules"])
	for _, w := range []string{"widgets", "deployments", "configmaps", "/metrics"} {
		if !strings.Contains(string(role), w) {
			t.Errorf("the hub's ClusterRole lacks %s:\n%s", w, role)
		}
	}
	if strings.Contains(string(role), "secrets") {
		t.Errorf("the hub's ClusterRole reads secrets, which the operator only gets by name:\n%s", role)
	}
	scale, _ := yaml.Marshal(r.Objects[2]["rules"])
	if !strings.Contains(string(scale), "deployments/scale") || !strings.Contains(string(scale), "- widget-controller") {
		t.Errorf("the hub's Role does not scale the Deployment by name:\n%s", scale)
	}
}

func TestDeriveBadInput(t *testing.T) {
	objs := objects(t, release)
	second := objects(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: other, namespace: widget-system}\n")
	unknown := objects(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-manager}
rules:
- apiGroups: [example.org]
  resources: [gadgets]
  verbs: [list, watch]
`)
	wildcard := objects(t, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-manager}
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]
`)
	without := func(kind string) []obj {
		var out []obj
		for _, o := range objs {
			if o["kind"] != kind {
				out = append(out, o)
			}
		}
		return out
	}
	replace := func(kind string, with []obj) []obj { return append(without(kind), with...) }
	for _, c := range []struct {
		name string
		objs []obj
		o    Options
		want string
	}{
		{"no Deployment", without("Deployment"), opts(), "no Deployment in the input"},
		{"two Deployments", append(objs, second...), opts(), "has 2 Deployments (widget-system/other, widget-system/widget-controller): name the operator's with --deployment"},
		{"the one named is missing", objs, Options{Deployment: "nope"}, "no Deployment nope"},
		{"no RBAC", without("ClusterRoleBinding"), opts(), ""}, // the namespaced grants remain
		{"an unknown resource", replace("ClusterRole", unknown), opts(), "gadgets.example.org, which is neither a CRD of the input nor a Kubernetes API"},
		{"only a wildcard", replace("ClusterRole", wildcard), Options{Namespaces: []string{"elsewhere"}}, "nothing to watch"},
		{"every kind ignored", objs, Options{Ignore: []string{"Widget", "apps/Deployment", "ConfigMap"}}, "nothing to watch"},
		{"an ambiguous or unknown owner", objs, Options{Owners: map[string]string{"Deployment": "Gizmo"}}, "--owner Deployment=Gizmo: no kind Gizmo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Derive(c.objs, c.o)
			if c.want == "" {
				if err != nil {
					t.Fatalf("want no error, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
