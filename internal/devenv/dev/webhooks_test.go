package dev

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestPlanWebhooks: the clientConfigs that name a Service in front of a
// Deployment dev runs are rewritten to its local URL with dev's CA; the
// process gets the port, the certificate folder, and its arguments that
// name the certificate volume's mountPath get the folder. Others are left
// as they are.
func TestPlanWebhooks(t *testing.T) {
	objs, err := decode("test", []byte(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: op-webhooks, namespace: ns}
spec:
  template:
    metadata: {labels: {app: op, component: webhooks}}
    spec:
      containers:
      - name: webhooks
        image: ko://example.com/op/cmd
        args: [--mode=webhooks, --webhook-cert-path=/tmp/k8s-webhook-server/serving-certs]
        volumeMounts: [{name: cert, mountPath: /tmp/k8s-webhook-server/serving-certs}]
      volumes: [{name: cert, secret: {secretName: op-webhooks-cert}}]
---
apiVersion: v1
kind: Service
metadata: {name: op-webhooks, namespace: ns}
spec:
  selector: {app: op, component: webhooks}
  ports: [{port: 443, targetPort: webhook-server}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: opzero-ns-op}
webhooks:
- name: vop.example.com
  clientConfig: {service: {name: op-webhooks, namespace: ns, path: /validate-x, port: 443}, caBundle: Zm9v}
- name: elsewhere.example.com
  clientConfig: {service: {name: other, namespace: ns, path: /v}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: op-webhooks-cert, namespace: ns}
spec: {secretName: op-webhooks-cert}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  conversion:
    strategy: Webhook
    webhook:
      clientConfig: {service: {name: op-webhooks, namespace: ns, path: /convert, port: 443}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := &Platform{opts: Options{Objects: objs, Namespace: "default", Dir: t.TempDir()}}
	if err := p.planWebhooks(); err != nil {
		t.Fatal(err)
	}
	ws := p.webhookServers["ns/op-webhooks"]
	if ws == nil {
		t.Fatal("the Deployment behind the webhook Service is not planned")
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", ws.port)
	ca := base64.StdEncoding.EncodeToString(ws.ca)
	hooks, _, _ := unstructured.NestedSlice(objs[2].Object, "webhooks")
	cc := hooks[0].(map[string]any)["clientConfig"].(map[string]any)
	if cc["url"] != base+"/validate-x" || cc["caBundle"] != ca || cc["service"] != nil {
		t.Errorf("validating webhook's clientConfig %v, want url %s/validate-x and dev's CA", cc, base)
	}
	if other := hooks[1].(map[string]any)["clientConfig"].(map[string]any); other["url"] != nil || other["service"] == nil {
		t.Errorf("a webhook of a Service dev does not run was rewritten: %v", other)
	}
	if len(p.opts.Objects) != 5 || p.opts.Objects[3].GetKind() != "Secret" || p.opts.Objects[3].GetName() != "op-webhooks-cert" || p.opts.Objects[4].GetKind() != "CustomResourceDefinition" {
		t.Errorf("objects to apply %d, want 5: the cert-manager Certificate replaced by the Secret dev issues for it", len(p.opts.Objects))
	}
	conv, _, _ := unstructured.NestedMap(objs[4].Object, "spec", "conversion", "webhook", "clientConfig")
	if conv["url"] != base+"/convert" || conv["caBundle"] != ca {
		t.Errorf("CRD conversion clientConfig %v, want url %s/convert and dev's CA", conv, base)
	}
	if len(p.webhookConfigs) != 1 {
		t.Errorf("%d webhook configurations to delete at Stop, want 1", len(p.webhookConfigs))
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(ws.dir, f)); err != nil {
			t.Error(err)
		}
	}
	cs, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", "containers")
	argv := []string{"--mode=webhooks", "--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs"}
	env, got := p.webhookProcess(objs[0], cs[0].(map[string]any), argv)
	if got != ws || argv[1] != "--webhook-cert-path="+ws.dir {
		t.Errorf("args %v, want the certificate folder %s", argv, ws.dir)
	}
	if want := fmt.Sprintf("OPZERO_WEBHOOK_PORT=%d OPZERO_WEBHOOK_CERT_DIR=%s", ws.port, ws.dir); strings.Join(env, " ") != want {
		t.Errorf("env %v, want %s", env, want)
	}
}
