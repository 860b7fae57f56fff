package unchanged

import (
	"fmt"
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

// TestDeriveEvents: --events Kind=... sets the events of that kind's
// resource, each type once in the order created, updated, deleted, keyed
// by Kind or group/Kind, and says so; the kinds not named get none (every
// type wakes it).
func TestDeriveEvents(t *testing.T) {
	o := opts()
	o.Events = map[string][]string{"Widget": {"deleted", "created", "deleted"}, "apps/Deployment": {"updated"}}
	r, err := Derive(objects(t, release), o)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, res := range r.Objects[0]["spec"].(obj)["resources"].([]any) {
		res := res.(obj)
		got[res["kind"].(string)] = res["events"]
	}
	want := map[string]any{"Widget": []any{"created", "deleted"}, "Deployment": []any{"updated"}, "ConfigMap": nil}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events by kind %v, want %v", got, want)
	}
	notes := ""
	for _, n := range r.Notes {
		notes += "[" + n.Sure + "] " + n.Text + "\n"
	}
	if !strings.Contains(notes, "[certain] Widget: only a change of type created, deleted wakes it (--events)") {
		t.Errorf("notes do not say Widget's events:\n%s", notes)
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
		{"events of a kind it does not watch", objs, Options{Events: map[string][]string{"Secret": {"created"}}},
			"--events Secret=...: it watches no Secret (its roles grant list and watch of ConfigMap, Deployment, Widget); want Kind=created,updated,deleted"},
		{"events of another group's kind", objs, Options{Events: map[string][]string{"example.org/Widget": {"created"}}}, "it watches no example.org/Widget"},
		{"a selector of a kind it does not watch", objs, Options{Selectors: map[string]string{"Secret": "app=x"}},
			"--selector Secret=...: it watches no Secret (its roles grant list and watch of ConfigMap, Deployment, Widget); want Kind=<label selector>"},
		{"an owner filter of a kind it does not watch", objs, Options{Owners: map[string]string{"apps/StatefulSet": "Widget"}},
			"--owner apps/StatefulSet=...: it watches no apps/StatefulSet"},
		{"an unknown event type", objs, Options{Events: map[string][]string{"Widget": {"created", "patched"}}},
			`--events Widget=created,patched: "patched" is no type of change; want created, updated, deleted`},
		{"no event type", objs, Options{Events: map[string][]string{"Widget": nil}}, "--events Widget=: name the types of change"},
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

// kubebuilder's webhook wiring (config/webhook, config/certmanager): a
// Service selecting the manager's pods, a Certificate, configurations the
// cainjector fills; one configuration of someone else's, and a CRD that
// converts through the manager.
const webhooked = `
apiVersion: v1
kind: Service
metadata: {name: widget-webhook-service, namespace: widget-system}
spec:
  selector: {control-plane: controller-manager}
  ports: [{port: 443, targetPort: 9443}]
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: widget-serving-cert, namespace: widget-system}
spec: {secretName: webhook-server-cert, dnsNames: [widget-webhook-service.widget-system.svc]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: widget-validating-webhook-configuration
  annotations: {cert-manager.io/inject-ca-from: widget-system/widget-serving-cert}
webhooks:
- name: vwidget-v1.kb.io
  clientConfig:
    service: {name: widget-webhook-service, namespace: widget-system, path: /validate-example-com-v1-widget}
  rules: [{operations: [CREATE, UPDATE], apiGroups: [example.com], apiVersions: [v1], resources: [widgets]}]
  failurePolicy: Fail
  sideEffects: None
  timeoutSeconds: 5
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: widget-mutating-webhook-configuration}
webhooks:
- name: mwidget-v1.kb.io
  clientConfig:
    caBundle: Q0E=
    service: {name: widget-webhook-service, namespace: widget-system, port: 443, path: /mutate-example-com-v1-widget}
  rules: [{operations: [CREATE], apiGroups: [example.com], apiVersions: [v1], resources: [widgets]}]
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: someone-elses}
webhooks:
- name: v.other.io
  clientConfig:
    service: {name: other, namespace: other-system, path: /validate}
  sideEffects: None
  admissionReviewVersions: [v1]
`

// TestDeriveWebhooks: the configurations that call the Deployment's pods
// are rewritten to call the hub (its Service, the install's token in the
// path), with the operator's Service and CA in annotations (the
// Certificate's Secret for an injected one, whose cainjector annotation
// goes), and the hub may read that Service and Secret and write those
// caBundles; someone else's configuration is left out; a short timeout
// and a conversion webhook are warned of. Bad input: an injected CA whose
// Certificate is not in the input, no CA at all.
func TestDeriveWebhooks(t *testing.T) {
	in := strings.Replace(release, "      serviceAccountName: widget\n", "      serviceAccountName: widget\n", 1)
	in = strings.Replace(in, "kind: Deployment\nmetadata: {name: widget-controller, namespace: widget-system}\nspec:\n  template:\n",
		"kind: Deployment\nmetadata: {name: widget-controller, namespace: widget-system}\nspec:\n  template:\n    metadata: {labels: {control-plane: controller-manager}}\n", 1)
	o := opts()
	o.WebhookToken = "tok"
	r, err := Derive(objects(t, in+"\n---\n"+webhooked), o)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]obj{}
	for _, x := range r.Objects {
		got[x["kind"].(string)+" "+str(x, "metadata", "name")] = x
	}
	if _, ok := got["ValidatingWebhookConfiguration someone-elses"]; ok {
		t.Error("someone else's configuration was rewritten")
	}
	v := got["ValidatingWebhookConfiguration widget-validating-webhook-configuration"]
	m := got["MutatingWebhookConfiguration widget-mutating-webhook-configuration"]
	if v == nil || m == nil {
		t.Fatalf("the operator's configurations not in the output: %v", keys(got))
	}
	ann := mapAt(v, "metadata", "annotations")
	if ann["cert-manager.io/inject-ca-from"] != nil || ann["opzero.dev/upstream-ca-secret"] != "webhook-server-cert" ||
		ann["opzero.dev/upstream-service"] != "widget-webhook-service:443" || ann["opzero.dev/operator"] != "widget-system/widget-controller" ||
		mapAt(v, "metadata", "labels")["opzero.dev/hub-webhooks"] != "true" {
		t.Errorf("validating configuration's metadata: %v", v["metadata"])
	}
	cc := mapAt(list(v["webhooks"])[0], "clientConfig")
	if s := mapAt(cc, "service"); str(s, "namespace") != "opzero-system" || str(s, "name") != "opzero-hub" ||
		str(s, "path") != "/admission/widget-system/widget-controller/tok/validate-example-com-v1-widget" || cc["caBundle"] != nil {
		t.Errorf("validating webhook's clientConfig: %v", cc)
	}
	if a := mapAt(m, "metadata", "annotations"); a["opzero.dev/upstream-ca-bundle"] != "Q0E=" || a["opzero.dev/upstream-ca-secret"] != nil {
		t.Errorf("mutating configuration's annotations: %v (want its caBundle as the operator's CA)", a)
	}
	if list(m["webhooks"])[0]["failurePolicy"] != nil || list(v["webhooks"])[0]["failurePolicy"] != "Fail" {
		t.Error("the webhooks' own settings were changed")
	}
	role := got["Role opzero-hub-target-widget-controller"]
	rules := fmtRules(role["rules"])
	for _, want := range []string{"[services] [widget-webhook-service] [get]", "[secrets] [webhook-server-cert] [get]"} {
		if !strings.Contains(rules, want) {
			t.Errorf("the hub's Role lacks %q: %s", want, rules)
		}
	}
	cr := fmtRules(got["ClusterRole opzero-hub:widget-system:widget-controller"]["rules"])
	for _, want := range []string{"[validatingwebhookconfigurations] [widget-validating-webhook-configuration] [patch]", "[mutatingwebhookconfigurations] [widget-mutating-webhook-configuration] [patch]"} {
		if !strings.Contains(cr, want) {
			t.Errorf("the hub's ClusterRole lacks %q: %s", want, cr)
		}
	}
	notes := notesText(r)
	if !strings.Contains(notes, "timeoutSeconds 5") {
		t.Errorf("no warning of the 5 s timeout in:\n%s", notes)
	}

	// A conversion webhook keeps it up: warned.
	conv := strings.Replace(in, "  scope: Namespaced\n", "  scope: Namespaced\n  conversion: {strategy: Webhook, webhook: {conversionReviewVersions: [v1], clientConfig: {service: {name: widget-webhook-service, namespace: widget-system, path: /convert}}}}\n", 1)
	r, err = Derive(objects(t, conv+"\n---\n"+webhooked), o)
	if err != nil || !strings.Contains(notesText(r), "converts through the Deployment's pods") {
		t.Errorf("conversion webhook: %v, notes:\n%s", err, notesText(r))
	}

	for _, tc := range []struct{ cut, want string }{
		{"kind: Certificate\n", "not in the input: give it with -f"},
		{"    caBundle: Q0E=\n", "no caBundle and no cert-manager.io/inject-ca-from"},
	} {
		bad := strings.Replace(webhooked, tc.cut, map[string]string{"kind: Certificate\n": "kind: NotACertificate\n"}[tc.cut], 1)
		if _, err := Derive(objects(t, in+"\n---\n"+bad), o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("without %q: %v, want an error saying %q", strings.TrimSpace(tc.cut), err, tc.want)
		}
	}
}

func keys(m map[string]obj) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func fmtRules(v any) string {
	var b strings.Builder
	for _, r := range list(v) {
		fmt.Fprintf(&b, "%v %v %v %v\n", r["apiGroups"], r["resources"], r["resourceNames"], r["verbs"])
	}
	return b.String()
}

func notesText(r *Result) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "[%s] %s\n", n.Sure, n.Text)
	}
	return b.String()
}
