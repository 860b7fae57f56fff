package manifests_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestProjectWebhooksInYAML: a project that declares its webhooks in
// config/webhook YAML (no +kubebuilder:webhook marker) has those the
// binary registers configured: a file that opens with a comment is read,
// a webhook at a path the binary does not register or a marker already
// names is left out, kustomize's files are not read.
func TestProjectWebhooksInYAML(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config", "webhook")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("validating.yaml", `# the project's own
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: v}
webhooks:
- name: served.example.com
  clientConfig: {service: {name: s, namespace: ns, path: /validate-served}}
- name: elsewhere.example.com
  clientConfig: {service: {name: s, namespace: ns, path: /validate-elsewhere}}
- name: marked.example.com
  clientConfig: {service: {name: s, namespace: ns, path: /validate-marked}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: m}
webhooks:
- name: defaults.example.com
  clientConfig: {service: {name: s, namespace: ns, path: /mutate-served}}
`)
	write("kustomization.yaml", "resources: [validating.yaml]\n")
	mut, val, files, err := manifests.ProjectWebhooks(root, root, nil, []string{"/validate-served", "/mutate-served", "/validate-marked"}, []string{"/validate-marked"})
	if err != nil {
		t.Fatal(err)
	}
	if len(val) != 1 || val[0].Name != "served.example.com" || len(mut) != 1 || mut[0].Name != "defaults.example.com" {
		t.Fatalf("validating %v, mutating %v; want served.example.com and defaults.example.com", val, mut)
	}
	if f := files["served.example.com"]; f != filepath.Join("config", "webhook", "validating.yaml") {
		t.Errorf("file of served.example.com %q", f)
	}
	if _, _, _, err := manifests.ProjectWebhooks(t.TempDir(), ".", nil, []string{"/x"}, nil); err != nil {
		t.Errorf("a project without config/webhook: %v", err)
	}
}
