package manifests

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// WebhookCert is the webhooks Service's serving certificate and the CA
// that signed it (the caBundle of the webhook configurations), PEM.
type WebhookCert struct {
	CA, Cert, Key []byte
}

// certValidity is how long a generated certificate is valid: nothing
// rotates it (regenerating the manifests with a new one does).
const certValidity = 10 * 365 * 24 * time.Hour

// newWebhookCert makes a CA and a serving certificate it signs for the
// DNS names, both ECDSA P-256.
func newWebhookCert(names []string, now time.Time) (WebhookCert, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return WebhookCert{}, err
	}
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "opzero webhooks CA " + names[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return WebhookCert{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return WebhookCert{}, err
	}
	leaf := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return WebhookCert{}, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return WebhookCert{}, err
	}
	return WebhookCert{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// check says whether c serves names, chains to its CA and is valid for at
// least another 30 days at now: a certificate worth keeping.
func (c WebhookCert) check(names []string, now time.Time) error {
	cb, _ := pem.Decode(c.Cert)
	if cb == nil {
		return errors.New("tls.crt is not PEM")
	}
	leaf, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return fmt.Errorf("tls.crt: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return errors.New("ca.crt holds no PEM certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now.Add(30 * 24 * time.Hour),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("tls.crt against ca.crt, 30 days from now: %w", err)
	}
	for _, n := range names {
		if !slices.Contains(leaf.DNSNames, n) {
			return fmt.Errorf("tls.crt does not name %s", n)
		}
	}
	kb, _ := pem.Decode(c.Key)
	if kb == nil {
		return errors.New("tls.key is not PEM")
	}
	return nil
}

// ReadWebhookCert reads the webhooks' certificate from the Secret in dir's
// webhooks.yaml (nil: no such file or Secret), for Options.WebhookCert:
// regenerating a folder keeps its certificate.
func ReadWebhookCert(dir string) (*WebhookCert, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileWebhooks))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var s struct {
			Kind string            `json:"kind"`
			Type string            `json:"type"`
			Data map[string][]byte `json:"data"`
		}
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, FileWebhooks), err)
		}
		if s.Kind == "Secret" && s.Type == "kubernetes.io/tls" {
			return &WebhookCert{CA: s.Data["ca.crt"], Cert: s.Data["tls.crt"], Key: s.Data["tls.key"]}, nil
		}
	}
}
