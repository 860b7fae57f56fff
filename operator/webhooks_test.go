package operator_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestAdoptedWebhooksMode: one binary of a kubebuilder-style project
// (testdata/webhooksop) runs twice, as opzero deploys it: serverless with
// its webhooks left out (ENABLE_WEBHOOKS=false), and --mode=webhooks,
// always on. The API server calls the defaulting and validating webhooks
// of the second, the first reconciles. The project asks for leader
// election (--leader-elect) with no namespace, which fails outside a
// cluster: the webhooks process starts because it does not use it. Both
// processes' memory is logged.
func TestAdoptedWebhooksMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary and runs it twice against a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "webhooksop")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/webhooksop").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)

	certDir, caPEM := servingCert(t)
	port, probe := testkit.FreePort(t), testkit.FreePort(t)
	wh := exec.Command(bin, "--mode=webhooks", "--leader-elect", "--webhook-cert-path="+certDir, fmt.Sprint("--webhook-port=", port),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe))
	wh.Env = kubeconfig
	webhooks, err := testkit.StartChild(t, wh, fmt.Sprintf("http://127.0.0.1:%d/readyz", probe), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	sl := exec.Command(bin, "--insecure-no-auth", "--addr="+addr, "--health-probe-bind-address=0")
	sl.Env = append(kubeconfig, "ENABLE_WEBHOOKS=false")
	serverless, err := testkit.StartChild(t, sl, "http://"+addr+"/healthz", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	registerWebhooks(t, env.Client, ns, port, caPEM)
	// The API server loads webhook configurations shortly after they are
	// created: wait until both are in force (a probe created before is
	// deleted again).
	n := 0
	inForce := func(spec v1.ConfigWatcherSpec, called func(*v1.ConfigWatcher, error) bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			n++
			probe := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", n), Namespace: ns}, Spec: spec}
			err := env.Client.Create(ctx, probe)
			if called(probe, err) {
				return true, nil
			}
			if err == nil {
				_ = env.Client.Delete(ctx, probe)
			}
			return false, nil
		}
	}
	testkit.Eventually(t, 30*time.Second, "the validating webhook in force", inForce(v1.ConfigWatcherSpec{ConfigMap: "forbidden"},
		func(_ *v1.ConfigWatcher, err error) bool {
			return err != nil && strings.Contains(err.Error(), "configMap forbidden is not allowed")
		}))
	testkit.Eventually(t, 30*time.Second, "the defaulting webhook in force", inForce(v1.ConfigWatcherSpec{ConfigMap: "one"},
		func(p *v1.ConfigWatcher, err error) bool { return err == nil && p.Spec.PodSelector["app"] == p.Name }))

	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Spec: v1.ConfigWatcherSpec{ConfigMap: "one"}}
	if err := env.Client.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	if got := cw.Spec.PodSelector["app"]; got != "a" {
		t.Fatalf("podSelector %v after create, want app=a set by the defaulting webhook", cw.Spec.PodSelector)
	}
	bad := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: v1.ConfigWatcherSpec{ConfigMap: "forbidden"}}
	if err := env.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "configMap forbidden is not allowed") {
		t.Fatalf("creating a ConfigWatcher the validating webhook refuses: %v, want its message", err)
	}

	post(t, "http://"+addr, cloudevent.Add, cw, "configwatchers")
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-owned"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the serverless controller did not reconcile the ConfigWatcher: %v", err)
	}
	for _, c := range []struct {
		what string
		c    *testkit.Child
	}{{"--mode=webhooks (always on)", webhooks}, {"serverless (scales to zero)", serverless}} {
		rss, hwm := proc.Mem(c.c.Cmd.Process.Pid)
		t.Logf("%s: RSS %.1f MiB (peak %.1f MiB)", c.what, rss, hwm)
	}
}

// registerWebhooks points the API server at the webhooks for ConfigWatchers
// in ns, at https://127.0.0.1:port with the paths controller-runtime's
// builder registers.
func registerWebhooks(t *testing.T, c client.Client, ns string, port int, caPEM []byte) {
	t.Helper()
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{v1.GroupVersion.Group}, APIVersions: []string{"v1"}, Resources: []string{"configwatchers"}},
	}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	cfg := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, path)), CABundle: caPEM}
	}
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	mut := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "mcw-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mconfigwatcher.k8spatterns.io", ClientConfig: cfg("/mutate-k8spatterns-io-v1-configwatcher"),
			Rules: rules, NamespaceSelector: sel, SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"}}}}
	val := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "vcw-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "vconfigwatcher.k8spatterns.io", ClientConfig: cfg("/validate-k8spatterns-io-v1-configwatcher"),
			Rules: rules, NamespaceSelector: sel, SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"}}}}
	for _, o := range []client.Object{mut, val} {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
}

// servingCert writes a self-signed serving certificate for 127.0.0.1 as
// tls.crt and tls.key in a new folder, and returns the folder and the
// certificate (the CA bundle).
func servingCert(t *testing.T) (dir string, caPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhooks"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, caPEM
}
