package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/opzero/opzero/testenv"
)

// testCA is a CA that signs leaves for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf signs a certificate for usage (server: 127.0.0.1), as PEM pair.
func (ca testCA) leaf(t *testing.T, cn string, usage x509.ExtKeyUsage) (crt, key []byte) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// TestClientCertificateRequired: with a client CA, a caller without a
// client certificate, or with one another CA signed, fails the TLS
// handshake; one the CA signed (the API server's, from its
// AdmissionConfiguration kubeconfig) is served.
func TestClientCertificateRequired(t *testing.T) {
	env := testenv.Get(t)
	dir := t.TempDir()
	serving, clients, other := newTestCA(t), newTestCA(t), newTestCA(t)
	crt, key := serving.leaf(t, "hub", x509.ExtKeyUsageServerAuth)
	_ = os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "client-ca.crt"), clients.pem, 0o600)
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
	roots.AppendCertsFromPEM(serving.pem)
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
	pair := func(ca testCA) tls.Certificate {
		c, k := ca.leaf(t, "kube-apiserver", x509.ExtKeyUsageClientAuth)
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
