package bundles_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
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
