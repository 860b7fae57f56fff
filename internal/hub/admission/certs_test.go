package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoControllerManager: true, KnativeCRDs: true}))
}

// TestSelfManagedCertificate: on a real API server, a hub without a
// certificate folder makes its CA and serving certificate in the Secret,
// serves it for its Service's names, and writes the CA into the caBundle
// of the labelled webhook configurations that call its Service (not into
// others); a second replica serves the same certificate; a leaf about to
// expire is made again from the same CA, so the caBundles stay.
func TestSelfManagedCertificate(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	svc := types.NamespacedName{Namespace: ns, Name: "opzero-hub"}
	secret := types.NamespacedName{Namespace: ns, Name: "opzero-hub-webhook-certs"}
	ours := webhookConfig(t, env, ns+"-ours", map[string]string{LabelViaHub: "true"}, svc)
	other := webhookConfig(t, env, ns+"-other", nil, svc) // not labelled: not the hub's
	start := func() (*Server, string) {
		s, err := New(env.Config, Options{Addr: "127.0.0.1:0", CertSecret: secret, Service: svc, Log: testr.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		addr, err := s.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, addr.String()
	}
	s1, addr1 := start()
	s2, addr2 := start()
	t.Cleanup(func() { cancel(); s1.Wait(); s2.Wait() })

	var ca []byte
	testkit.Eventually(t, 30*time.Second, "the Secret made and the CA in the labelled configuration's caBundle", func(ctx context.Context) (bool, error) {
		sec := &corev1.Secret{}
		if err := env.Client.Get(ctx, secret, sec); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ca = sec.Data["ca.crt"]
		cfg := &admissionregv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: ours}, cfg); err != nil {
			return false, err
		}
		return len(ca) > 0 && string(cfg.Webhooks[0].ClientConfig.CABundle) == string(ca), nil
	})
	cfg := &admissionregv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: other}, cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks[0].ClientConfig.CABundle) != 0 {
		t.Error("a configuration without the hub's label got its caBundle written")
	}
	name := "opzero-hub." + ns + ".svc"
	leaf1, leaf2 := servedLeaf(t, addr1, name, ca), servedLeaf(t, addr2, name, ca)
	if !leaf1.Equal(leaf2) {
		t.Error("the two replicas serve different certificates")
	}

	// A leaf about to expire is made again, from the same CA.
	sc := secretCerts{dyn: s1.dyn, secret: secret, names: s1.certs.(secretCerts).names, now: func() time.Time { return time.Now().Add(leafValidity - 10*24*time.Hour) }}
	kp, err := sc.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kp.leaf.Equal(leaf1) || string(kp.caPEM) != string(ca) {
		t.Fatalf("renewed: same leaf %v, same CA %v; want a new leaf from the same CA", kp.leaf.Equal(leaf1), string(kp.caPEM) == string(ca))
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	if _, err := kp.leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: sc.now()}); err != nil {
		t.Fatalf("the renewed leaf does not verify with the caBundle: %v", err)
	}
}

// servedLeaf dials addr as the API server would (the Service's name
// serverName, the caBundle) and returns the certificate served.
func servedLeaf(t *testing.T, addr, serverName string, ca []byte) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	var leaf *x509.Certificate
	testkit.Eventually(t, 30*time.Second, "a TLS handshake with "+addr, func(ctx context.Context) (bool, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{RootCAs: pool, ServerName: serverName}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, nil
		}
		defer c.Close()
		leaf = c.(*tls.Conn).ConnectionState().PeerCertificates[0]
		return true, nil
	})
	return leaf
}

// webhookConfig creates a validating configuration calling the hub's
// Service svc, with labels.
func webhookConfig(t *testing.T, env *testenv.Env, name string, labels map[string]string, svc types.NamespacedName) string {
	t.Helper()
	none := admissionregv1.SideEffectClassNone
	cfg := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
		Annotations: map[string]string{AnnotationOperator: svc.Namespace + "/op"}},
		Webhooks: []admissionregv1.ValidatingWebhook{{Name: "v.example.com", SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			// matches nothing real: the API server never calls it
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"opzero.dev/never": "x"}},
			ClientConfig: admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{Namespace: svc.Namespace, Name: svc.Name,
				Path: ptr.To(Path(svc.Namespace, "op", "t0k", "/validate")), Port: ptr.To[int32](443)}},
			Rules: rules("example.com", "things", admissionregv1.Create)}}}
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	return name
}
