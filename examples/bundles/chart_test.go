package bundles_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// chartDeploy is what a chart renders beside the project's CRD, role and
// webhook: its Deployment, the binding of its role to the Deployment's
// service account, and a role for the chart's users (aggregated into
// edit) that is not the operator's.
const chartDeploy = `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bundles, namespace: bundles-system}
spec:
  selector: {matchLabels: {app: bundles}}
  template:
    metadata: {labels: {app: bundles}}
    spec:
      serviceAccountName: bundles
      containers: [{name: manager, image: bundles}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bundles}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: manager-role}
subjects: [{kind: ServiceAccount, name: bundles, namespace: bundles-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: bundles-edit
  labels: {rbac.authorization.k8s.io/aggregate-to-edit: "true"}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [delete]}
`

// TestManifestsFromARenderedChart: the project without its config/, its
// deploy files given as one rendered chart (--project-manifests): the
// webhook declared there is configured, the Bundle CRD comes from it
// (controller-gen makes none: no +groupName), and the generated role is
// compared with the role bound to the chart's Deployment only (the
// chart's aggregated edit role is its users', not the operator's). A chart
// without the webhook the binary registers is an error naming the way out.
func TestManifestsFromARenderedChart(t *testing.T) {
	wd, _ := os.Getwd()
	root, _ := filepath.Abs(filepath.Join(wd, "..", ".."))
	dir := t.TempDir()
	err := filepath.WalkDir(wd, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(wd, p)
		if d.IsDir() {
			if rel == "config" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "go.mod" {
			b = bytes.Replace(b, []byte("=> ../.."), []byte("=> "+root), 1)
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	var chart bytes.Buffer
	for _, f := range []string{"config/crd/bundles.opzero.dev_bundles.yaml", "config/rbac/role.yaml"} {
		b, err := os.ReadFile(filepath.Join(wd, f))
		if err != nil {
			t.Fatal(err)
		}
		chart.WriteString("---\n")
		chart.Write(b)
	}
	webhook, err := os.ReadFile(filepath.Join(wd, "config/webhook/validating.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	noWebhook := chart.String() + chartDeploy
	chart.WriteString("---\n")
	chart.Write(webhook)
	chart.WriteString(chartDeploy)
	chartFile := filepath.Join(dir, "chart.yaml")
	if err := os.WriteFile(chartFile, chart.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	var warnings bytes.Buffer
	objs, err := manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Namespace: "bundles-system", Warnings: &warnings, ProjectManifests: []string{chartFile}})
	if err != nil {
		t.Fatal(err)
	}
	w := warnings.String()
	if !strings.Contains(w, "the project's own chart.yaml is used") {
		t.Errorf("warnings:\n%s\nwant the Bundle CRD taken from chart.yaml", w)
	}
	if strings.Contains(w, "grants") {
		t.Errorf("warnings:\n%s\nwant no role gap: the chart's edit role is not the operator's", w)
	}
	var crds, validating []string
	for _, o := range objs {
		switch o.Kind() {
		case "CustomResourceDefinition":
			crds = append(crds, o.Obj["metadata"].(map[string]any)["name"].(string))
		case "ValidatingWebhookConfiguration":
			for _, w := range o.Obj["webhooks"].([]any) {
				validating = append(validating, w.(map[string]any)["clientConfig"].(map[string]any)["service"].(map[string]any)["path"].(string))
			}
		}
	}
	if !slices.Contains(crds, "bundles.bundles.opzero.dev") {
		t.Errorf("CRDs %v: want the chart's Bundle CRD", crds)
	}
	if len(validating) != 1 || !strings.HasSuffix(validating[0], "/validate-bundle") {
		t.Errorf("validating webhooks %q, want the chart's /validate-bundle through the hub", validating)
	}

	// The same chart with the user role bound to the operator: its grant is
	// the operator's, and the generated role lacks it.
	bound := chart.String() + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bundles-edit}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bundles-edit}
subjects: [{kind: ServiceAccount, name: bundles, namespace: bundles-system}]
`
	if err := os.WriteFile(chartFile, []byte(bound), 0o644); err != nil {
		t.Fatal(err)
	}
	warnings.Reset()
	if _, err := manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Namespace: "bundles-system", Warnings: &warnings, ProjectManifests: []string{chartFile}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warnings.String(), "chart.yaml grants delete secrets") {
		t.Errorf("warnings:\n%s\nwant one naming the bound role's delete secrets", warnings.String())
	}

	// The chart's scoping: its ClusterRole grants no Secrets, a Role bound
	// in the trust namespace does (the Secrets it reads are there): the
	// generated role grants them there only, though the project's markers
	// ask for them cluster-wide, and says so; the rest stays as it was.
	role, err := os.ReadFile(filepath.Join(wd, "config/rbac/role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scoped := strings.Replace(chart.String(), string(role), "", 1)
	if scoped == chart.String() {
		t.Fatal("config/rbac/role.yaml not found in the chart")
	}
	scoped += `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: manager-role}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [create, delete, get, list, patch, update, watch]}
- {apiGroups: [""], resources: [namespaces], verbs: [get, list, watch]}
- {apiGroups: [bundles.opzero.dev], resources: [bundles], verbs: [get, list, watch]}
- {apiGroups: [bundles.opzero.dev], resources: [bundles/status], verbs: [get, patch, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bundles-trust, namespace: bundles-system}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bundles-trust, namespace: bundles-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: bundles-trust}
subjects: [{kind: ServiceAccount, name: bundles, namespace: bundles-system}]
`
	if err := os.WriteFile(chartFile, []byte(scoped), 0o644); err != nil {
		t.Fatal(err)
	}
	warnings.Reset()
	objs, err = manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Namespace: "bundles-system", Warnings: &warnings, ProjectManifests: []string{chartFile}})
	if err != nil {
		t.Fatal(err)
	}
	if w := warnings.String(); !strings.Contains(w, "in those namespaces only") || !strings.Contains(w, "get,list,watch secrets in namespace bundles-system") || strings.Contains(w, "which the generated ClusterRole does not") {
		t.Errorf("warnings:\n%s\nwant a note that Secrets are granted in bundles-system only, and no role gap", w)
	}
	grantsSecrets := map[string]string{} // kind namespace/name: verbs
	var bindingSubject any
	for _, o := range objs {
		switch o.Kind() {
		case "ClusterRole", "Role":
			rules, _ := o.Obj["rules"].([]any) // an aggregated ClusterRole has none
			for _, r := range rules {
				m := r.(map[string]any)
				if slices.Contains(strs(m["resources"]), "secrets") {
					grantsSecrets[o.Kind()+" "+o.Namespace()+"/"+o.Name()] = strings.Join(strs(m["verbs"]), ",")
				}
			}
		case "RoleBinding":
			if o.Name() == "bundle-scoped" {
				bindingSubject = o.Obj["subjects"]
			}
		}
	}
	// opzero-hub-webhook-certs is the hub's own Role for its certificate.
	delete(grantsSecrets, "Role opzero-system/opzero-hub-webhook-certs")
	if want := map[string]string{"Role bundles-system/bundle-scoped": "get,list,watch"}; !maps.Equal(grantsSecrets, want) {
		t.Errorf("roles granting Secrets %v, want %v (none cluster-wide)", grantsSecrets, want)
	}
	if got := fmt.Sprint(bindingSubject); got != "[map[kind:ServiceAccount name:bundle namespace:bundles-system]]" {
		t.Errorf("bundle-scoped's RoleBinding subjects %s, want the operator's service account", got)
	}

	if !testing.Short() {
		rbacOnTheAPIServer(t, dir, scoped)
	}

	if err := os.WriteFile(chartFile, []byte(noWebhook), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Namespace: "bundles-system", ProjectManifests: []string{chartFile}})
	if err == nil || !strings.Contains(err.Error(), "/validate-bundle") || !strings.Contains(err.Error(), "--project-manifests") {
		t.Errorf("a chart without the webhook the binary registers: %v, want an error naming /validate-bundle and --project-manifests", err)
	}
	if _, err := manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Namespace: "bundles-system", ProjectManifests: []string{filepath.Join(dir, "missing.yaml")}}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing --project-manifests file: %v, want an error naming it", err)
	}
}

// rbacOnTheAPIServer applies the operator's generated RBAC for the scoped
// chart (in a namespace of its own) to the API server and asks it, as the
// operator's service account: Secrets in the trust namespace only,
// ConfigMaps everywhere.
func rbacOnTheAPIServer(t *testing.T, dir, chart string) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	file := filepath.Join(dir, "chart-"+ns+".yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(chart, "bundles-system", ns)), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Build(ctx, dir, "./cmd", manifests.Options{Namespace: ns, ProjectManifests: []string{file}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.File != manifests.FileRBAC || o.Obj["metadata"].(map[string]any)["labels"].(map[string]any)["app.kubernetes.io/component"] != "operator" {
			continue
		}
		u := &unstructured.Unstructured{Object: o.Obj}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("%s %s: %v", o.Kind(), o.Name(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	}
	for _, c := range []struct {
		verb, resource, ns string
		allowed            bool
	}{
		{"get", "secrets", ns, true},
		{"list", "secrets", ns, true},
		{"get", "secrets", "default", false},
		{"list", "secrets", "", false},
		{"list", "configmaps", "default", true},
		{"create", "events", "default", true},
	} {
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%s %s in %q allowed=%v", c.verb, c.resource, c.ns, c.allowed), func(ctx context.Context) (bool, error) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + ns + ":bundle",
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Resource: c.resource, Namespace: c.ns},
			}}
			if err := env.Client.Create(ctx, sar); err != nil {
				return false, err
			}
			return sar.Status.Allowed == c.allowed, nil
		})
	}
}
