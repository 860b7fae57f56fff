package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/pinned"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestClientCertificateRequired: with a client CA, a caller without a
// client certificate, or with one another CA signed, fails the TLS
// handshake; one the CA signed (the API server's, from its
// AdmissionConfiguration kubeconfig) is served.
func TestClientCertificateRequired(t *testing.T) {
	env := testenv.Get(t)
	dir := t.TempDir()
	serving, clients, other := testkit.NewCA(t), testkit.NewCA(t), testkit.NewCA(t)
	crt, key := serving.Leaf(t, "hub", x509.ExtKeyUsageServerAuth)
	_ = os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "client-ca.crt"), clients.PEM, 0o600)
	s, err := New(env.Config, Options{Addr: "127.0.0.1:0", CertDir: dir, ClientCA: filepath.Join(dir, "client-ca.crt"),
		Service: types.NamespacedName{Namespace: "x", Name: "opzero-hub"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Wait() })
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serving.PEM)
	get := func(certs ...tls.Certificate) (int, error) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
		var code int
		var err error
		for range 50 { // the certificate is read just after the start
			var resp *http.Response
			resp, err = hc.Get("https://" + addr.String() + "/healthz")
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
				return code, nil
			}
			if !strings.Contains(err.Error(), "no serving certificate") && !strings.Contains(err.Error(), "internal error") {
				return 0, err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return 0, err
	}
	pair := func(ca testkit.CA) tls.Certificate {
		c, k := ca.Leaf(t, "kube-apiserver", x509.ExtKeyUsageClientAuth)
		p, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if code, err := get(pair(clients)); err != nil || code != 200 {
		t.Fatalf("with a client certificate the CA signed: %d %v, want 200", code, err)
	}
	if _, err := get(); err == nil {
		t.Error("without a client certificate: served, want the handshake refused")
	}
	if _, err := get(pair(other)); err == nil {
		t.Error("with a client certificate another CA signed: served, want the handshake refused")
	}
}

// TestAPIServerClientCertificate: a real kube-apiserver, given a client
// certificate for the hub's address by its AdmissionConfiguration's
// kubeconfig (what a self-managed control plane's administrator writes),
// completes the TLS handshake of a hub that requires client certificates
// (--webhook-client-ca), and its call reaches the operator; the same API
// server calling the same hub under a name its kubeconfig gives no
// certificate for is refused at the handshake: the operator is not
// called and nothing is admitted (failurePolicy Fail).
func TestAPIServerClientCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane of its own (its API server's admission configuration)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	serving, clients := testkit.NewCA(t), testkit.NewCA(t)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crt, key := serving.Leaf(t, "hub", x509.ExtKeyUsageServerAuth)
	write("tls.crt", crt)
	write("tls.key", key)
	ccrt, ckey := clients.Leaf(t, "kube-apiserver", x509.ExtKeyUsageClientAuth)
	port := testkit.FreePort(t)
	hubHost := fmt.Sprintf("127.0.0.1:%d", port)
	kubeconfig := write("webhook-kubeconfig", fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
- name: %q
  user:
    client-certificate: %s
    client-key: %s
`, hubHost, write("apiserver-client.crt", ccrt), write("apiserver-client.key", ckey)))
	admissionConfig := write("admission.yaml", fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]s
`, kubeconfig))
	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	plane, err := controlplane.Up(upCtx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true,
		NoControllerManager: true, APIServerArgs: []string{"--admission-control-config-file=" + admissionConfig}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })
	crds, err := (pinned.Resolver{}).CRDs(upCtx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.InstallCRDs(upCtx, plane.Config, crds...); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(plane.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(plane.Config)
	if err != nil {
		t.Fatal(err)
	}

	// The operator: its Knative Service's address is a local server that
	// refuses every object, saying so.
	const ns, opName = "default", "gadgets"
	var calls atomic.Int64
	op := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var rev admissionv1.AdmissionReview
		_ = json.NewDecoder(r.Body).Decode(&rev)
		rev.Response = &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: false,
			Result: &metav1.Status{Message: "refused by the operator, reached through a client-certified call"}}
		rev.Request = nil
		_ = json.NewEncoder(w).Encode(rev)
	}))
	t.Cleanup(op.Close)
	ksvcs := dyn.Resource(schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}).Namespace(ns)
	ksvc, err := ksvcs.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"name": opName}, "spec": map[string]any{}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ksvc.Object["status"] = map[string]any{"address": map[string]any{"url": op.URL}}
	if _, err := ksvcs.UpdateStatus(ctx, ksvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	s, err := New(plane.Config, Options{Addr: hubHost, CertDir: dir, ClientCA: write("client-ca.crt", clients.PEM), NoEarly: true,
		Service: types.NamespacedName{Namespace: "opzero-system", Name: "opzero-hub"}, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	hubCtx, stop := context.WithCancel(ctx)
	if _, err := s.Start(hubCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); s.Wait() })

	// One webhook per name the API server may call the hub by: the
	// kubeconfig has a certificate for 127.0.0.1:<port>, none for
	// localhost:<port>. Each takes the ConfigMaps labelled for it.
	path := Path(ns, opName, "tok", "/validate-configmap")
	fail, none := admissionregv1.Fail, admissionregv1.SideEffectClassNone
	timeout := int32(5)
	hook := func(name, host string) admissionregv1.ValidatingWebhook {
		u := "https://" + host + path
		return admissionregv1.ValidatingWebhook{Name: name + ".example.com", AdmissionReviewVersions: []string{"v1"},
			ClientConfig:   admissionregv1.WebhookClientConfig{URL: &u, CABundle: serving.PEM},
			Rules:          rules("", "configmaps", admissionregv1.Create),
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"caller": name}},
			FailurePolicy:  &fail, SideEffects: &none, TimeoutSeconds: &timeout}
	}
	cfg := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "opzero-" + ns + "-" + opName, Labels: map[string]string{LabelViaHub: "true"}, Annotations: map[string]string{AnnotationOperator: ns + "/" + opName}},
		Webhooks:   []admissionregv1.ValidatingWebhook{hook("certified", hubHost), hook("anonymous", fmt.Sprintf("localhost:%d", port))},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(name, caller string) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"caller": caller}}}, metav1.CreateOptions{})
		return err
	}
	const refusal = "refused by the operator"
	var last error
	testkit.Eventually(t, 60*time.Second, "a create answered by the operator through the hub", func(context.Context) (bool, error) {
		last = create("certified", "certified")
		if last == nil {
			// admitted before the API server saw the webhook configuration:
			// removed, so that what is left at the end was admitted by the hub
			return false, cs.CoreV1().ConfigMaps(ns).Delete(ctx, "certified", metav1.DeleteOptions{})
		}
		return strings.Contains(last.Error(), refusal), nil
	})
	seen := calls.Load()
	err = create("anonymous", "anonymous")
	if err == nil {
		t.Fatal("a create whose webhook call presented no client certificate was admitted")
	}
	if strings.Contains(err.Error(), refusal) || calls.Load() != seen {
		t.Fatalf("a call without a client certificate reached the operator (%d calls, want %d): %v", calls.Load(), seen, err)
	}
	if !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("without a client certificate: %v, want the API server's failed call", err)
	}
	t.Logf("with the API server's client certificate: %v\nwithout: %v", last, err)
	for _, name := range []string{"certified", "anonymous"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s: %v, want not found (refused)", name, err)
		}
	}
}
