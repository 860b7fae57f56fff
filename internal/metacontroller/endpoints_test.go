package metacontroller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/testenv"
)

// pki is a CA and what it signed: a server certificate for 127.0.0.1 and a
// client certificate, PEM-encoded.
type pki struct {
	ca                   *x509.Certificate
	caKey                *ecdsa.PrivateKey
	caPEM                []byte
	serverCert, serverKy []byte
	clientCert, clientKy []byte
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{}
	p.caKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.serverCert, p.serverKy = p.sign(t, 2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKy = p.sign(t, 3, "metacontroller", x509.ExtKeyUsageClientAuth)
	return p
}

func (p *pki) sign(t *testing.T, serial int64, cn string, use x509.ExtKeyUsage) ([]byte, []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{use},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// authHook is webhook-auth's hook: HTTPS with a client certificate
// required, and a fixed Authorization header; it records what it saw.
type authHook struct {
	mu      sync.Mutex
	want    string   // the Authorization header it accepts
	headers []string // the Authorization headers it got
	clients int      // calls with a verified client certificate
}

func (h *authHook) serve(t *testing.T, p *pki) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.headers = append(h.headers, r.Header.Get("Authorization"))
		if len(r.TLS.VerifiedChains) > 0 {
			h.clients++
		}
		if r.Header.Get("Authorization") != h.want {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"working": "fine"}})
	}))
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	cert, err := tls.X509KeyPair(p.serverCert, p.serverKy)
	if err != nil {
		t.Fatal(err)
	}
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (h *authHook) seen() (headers []string, clients int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.headers...), h.clients
}

// credentialObjects makes webhook-auth's Secrets and ConfigMap in ns: the
// CA (ConfigMap auth-ca), the client certificate (Secret auth-client), the
// token (Secret auth-token).
func credentialObjects(t *testing.T, env *testenv.Env, ns string, p *pki, token string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-ca"}, Data: map[string]string{"ca.crt": string(p.caPEM)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-client"}, Data: map[string][]byte{"tls.crt": p.clientCert, "tls.key": p.clientKy}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-token"}, Data: map[string][]byte{"token": []byte(token + "\n")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-basic"}, Data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// webhookAuth is webhook-auth's endpointConfigs entry for host, every
// credential from ns.
func webhookAuth(host, ns string) v1alpha1.EndpointConfig {
	return v1alpha1.EndpointConfig{Host: host,
		CABundle:      &v1alpha1.CABundle{ConfigMapRef: &v1alpha1.ResourceKeyRef{Name: "auth-ca", Namespace: ns, Key: "ca.crt"}},
		Authorization: &v1alpha1.Authorization{Type: "Bearer", SecretRef: v1alpha1.SecretKeyRef{Name: "auth-token", Namespace: ns, Key: "token"}},
		ClientTLS:     &v1alpha1.ClientTLS{SecretRef: v1alpha1.SecretRef{Name: "auth-client", Namespace: ns}, CertKey: "tls.crt", PrivateKeyKey: "tls.key"},
	}
}

// TestEndpointConfigs: Metacontroller's webhook-auth, against a real API
// server: the hook is HTTPS with a private CA, requires a client
// certificate and a bearer token; the controller's endpointConfigs entry
// for its host gives the CA (a ConfigMap), the certificate and the token
// (Secrets), and the sync succeeds, sending that token instead of
// opzero's own. Failure paths: a wrong token (the hook answers 401: a
// Warning Event SyncError, as Metacontroller writes, and Synced=False
// HookFailed; nothing written), a missing Secret (named), no CA (the
// server is not trusted), authorization with basicAuth (refused); a
// webhook's own basicAuth overrides the entry.
func TestEndpointConfigs(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	p := newPKI(t)
	credentialObjects(t, env, ns, p, "good-token")
	h := &authHook{want: "Bearer good-token"}
	srv := h.serve(t, p)
	host := strings.TrimPrefix(srv.URL, "https://")

	controller := func(eps []v1alpha1.EndpointConfig, w *v1alpha1.Webhook) *Controller {
		if w == nil {
			w = webhook(srv.URL + "/sync").Webhook
		}
		return &Controller{Kind: "CompositeController", Name: "webhook-auth", Object: map[string]any{"kind": "CompositeController"},
			Parents:   []Decorated{{Resource: mustResolve(t, env, "example.com/v1", "helloworlds")}},
			Sync:      &v1alpha1.Hook{Webhook: w},
			Endpoints: eps}
	}
	reconciler := func(c *Controller) (*Reconciler, *record.FakeRecorder) {
		rec := record.NewFakeRecorder(10)
		tok := func(context.Context) (string, error) { return "opzero-token", nil }
		return &Reconciler{Client: env.Client, Config: &Config{Controllers: []*Controller{c}}, Hooks: &HookClient{Token: tok, Attempts: 1}, Recorder: rec}, rec
	}

	t.Run("webhook-auth", func(t *testing.T) {
		helloWorld(t, env, ns, "good")
		// the first entry names another host: not used
		r, rec := reconciler(controller([]v1alpha1.EndpointConfig{webhookAuth("elsewhere.metacontroller", ns+"-none"), webhookAuth(strings.ToUpper(host), ns)}, nil))
		if _, err := r.Reconcile(ctx, CompositeKey("webhook-auth", ns, "good")); err != nil {
			t.Fatal(err)
		}
		headers, clients := h.seen()
		if len(headers) != 1 || headers[0] != "Bearer good-token" || clients != 1 {
			t.Fatalf("the hook saw Authorization %q and %d client certificates, want the Secret's token once, with the certificate", headers, clients)
		}
		if evs := drain(rec); len(evs) != 0 {
			t.Fatalf("events %q after a sync that succeeded", evs)
		}
		// the rotated token is sent at the next sync
		tok := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "auth-token"}, tok); err != nil {
			t.Fatal(err)
		}
		tok.Data["token"] = []byte("rotated")
		if err := env.Client.Update(ctx, tok); err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		h.want = "Bearer rotated"
		h.mu.Unlock()
		if _, err := r.Reconcile(ctx, CompositeKey("webhook-auth", ns, "good")); err != nil {
			t.Fatalf("after the token's rotation: %v", err)
		}
	})

	t.Run("wrong token", func(t *testing.T) {
		helloWorld(t, env, ns, "wrong")
		h.mu.Lock()
		h.want = "Bearer something-else"
		h.mu.Unlock()
		t.Cleanup(func() { h.mu.Lock(); h.want = "Bearer rotated"; h.mu.Unlock() })
		r, rec := reconciler(controller([]v1alpha1.EndpointConfig{webhookAuth(host, ns)}, nil))
		if _, err := r.Reconcile(ctx, CompositeKey("webhook-auth", ns, "wrong")); err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("sync error %v, want the hook's 401", err)
		}
		evs := drain(rec)
		if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SyncError Sync error: HookFailed: ") || !strings.Contains(evs[0], "401") {
			t.Fatalf("events %q, want one Warning SyncError naming HookFailed and the 401", evs)
		}
		p := &unstructured.Unstructured{}
		p.SetGroupVersionKind(helloGVK)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wrong"}, p); err != nil {
			t.Fatal(err)
		}
		if w, _, _ := unstructured.NestedString(p.Object, "status", "working"); w != "" {
			t.Fatalf("status.working %q written after a refused call", w)
		}
	})

	for name, tc := range map[string]struct {
		eps  []v1alpha1.EndpointConfig
		want string
	}{
		"missing secret": {func() []v1alpha1.EndpointConfig {
			e := webhookAuth(host, ns)
			e.ClientTLS.SecretRef.Name = "no-such-secret"
			return []v1alpha1.EndpointConfig{e}
		}(), "reading Secret " + ns + "/no-such-secret"},
		"no CA": {func() []v1alpha1.EndpointConfig {
			e := webhookAuth(host, ns)
			e.CABundle = nil
			return []v1alpha1.EndpointConfig{e}
		}(), "certificate"},
		"authorization and basicAuth": {func() []v1alpha1.EndpointConfig {
			e := webhookAuth(host, ns)
			e.BasicAuth = &v1alpha1.BasicAuth{SecretRef: v1alpha1.SecretRef{Name: "auth-basic", Namespace: ns}}
			return []v1alpha1.EndpointConfig{e}
		}(), "exclude each other"},
		"bad CA": {func() []v1alpha1.EndpointConfig {
			e := webhookAuth(host, ns)
			junk := "not a certificate"
			e.CABundle = &v1alpha1.CABundle{Inline: &junk}
			return []v1alpha1.EndpointConfig{e}
		}(), "no PEM certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			parent := strings.ToLower(strings.ReplaceAll(name, " ", "-"))
			helloWorld(t, env, ns, parent)
			r, rec := reconciler(controller(tc.eps, nil))
			_, err := r.Reconcile(ctx, CompositeKey("webhook-auth", ns, parent))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("sync error %v, want one saying %q", err, tc.want)
			}
			if evs := drain(rec); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SyncError Sync error: HookFailed: ") {
				t.Fatalf("events %q, want one Warning SyncError", evs)
			}
		})
	}

	t.Run("the webhook's own basicAuth overrides the entry", func(t *testing.T) {
		helloWorld(t, env, ns, "own")
		h.mu.Lock()
		h.want = "Basic dTpw" // u:p
		h.mu.Unlock()
		u := srv.URL + "/sync"
		w := &v1alpha1.Webhook{URL: &u, CABundle: &v1alpha1.CABundle{Inline: ptr(string(p.caPEM))},
			ClientTLS: &v1alpha1.ClientTLS{SecretRef: v1alpha1.SecretRef{Name: "auth-client", Namespace: ns}},
			BasicAuth: &v1alpha1.BasicAuth{SecretRef: v1alpha1.SecretRef{Name: "auth-basic", Namespace: ns}}}
		e := webhookAuth(host, ns)
		e.ClientTLS = nil // were the entry used, no certificate would be sent and the handshake would fail
		r, _ := reconciler(controller([]v1alpha1.EndpointConfig{e}, w))
		if _, err := r.Reconcile(ctx, CompositeKey("webhook-auth", ns, "own")); err != nil {
			t.Fatal(err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestHostMatches: an endpointConfigs host matches the hook URL's host and
// port, without case, a missing port being the scheme's default.
func TestHostMatches(t *testing.T) {
	for _, tc := range []struct {
		host, url string
		want      bool
	}{
		{"hook.ns", "https://hook.ns/sync", true},
		{"hook.ns", "https://HOOK.ns:443/sync", true},
		{"hook.ns:443", "https://hook.ns/sync", true},
		{"hook.ns", "http://hook.ns:80/sync", true},
		{"hook.ns", "https://hook.ns:8443/sync", false},
		{"hook.ns:8443", "https://hook.ns:8443/sync", true},
		{"hook.ns:443", "http://hook.ns/sync", false},
		{"hook.other", "https://hook.ns/sync", false},
		{"127.0.0.1:9", "https://127.0.0.1:9/x", true},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostMatches(tc.host, u); got != tc.want {
			t.Errorf("host %q, URL %s: %v, want %v", tc.host, tc.url, got, tc.want)
		}
	}
}
