package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The hub's serving certificate. In a cluster the hub manages it itself,
// as knative/pkg's webhook certificate controller does: a CA and a leaf
// for the hub Service's names in one Secret that every replica reads,
// and the CA written into the caBundle of every webhook that calls the
// hub. opzero manifests writes no certificate for it: the hub is shared by
// every operator's manifests, which must not each bring their own.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// renewBefore: a leaf with less left is made again (same CA, so the
	// caBundles stay).
	renewBefore = 30 * 24 * time.Hour
	// certRefresh is how often a replica reads the Secret again (another
	// replica may have renewed it) or a folder's files.
	certRefresh = time.Minute
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// keyPair is a parsed serving certificate and its CA.
type keyPair struct {
	cert   *tls.Certificate
	leaf   *x509.Certificate
	caPEM  []byte
	source string // what was read, for the log
}

// certSource gives the current serving certificate.
type certSource interface {
	// load reads (or makes) the certificate; called at start and every
	// certRefresh.
	load(ctx context.Context) (*keyPair, error)
}

// fileCerts reads tls.crt and tls.key from a folder (opzero dev's, or a
// mounted Secret); it makes nothing and injects no caBundle.
type fileCerts struct{ dir string }

func (f fileCerts) load(context.Context) (*keyPair, error) {
	crt, err := os.ReadFile(filepath.Join(f.dir, "tls.crt"))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(f.dir, "tls.key"))
	if err != nil {
		return nil, err
	}
	return parsePair(crt, key, nil, f.dir)
}

// secretCerts keeps the certificate in a Secret it makes and renews.
type secretCerts struct {
	dyn    dynamic.Interface
	secret types.NamespacedName
	names  []string // DNS names of the hub's Service
	now    func() time.Time
}

func (s secretCerts) load(ctx context.Context) (*keyPair, error) {
	ri := s.dyn.Resource(secrets).Namespace(s.secret.Namespace)
	for range 5 { // another replica may write it between our read and write
		u, err := ri.Get(ctx, s.secret.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			data, err := s.make(nil, nil)
			if err != nil {
				return nil, err
			}
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
				"metadata": map[string]any{"name": s.secret.Name, "namespace": s.secret.Namespace,
					"labels": map[string]any{"app.kubernetes.io/name": "opzero-hub", "app.kubernetes.io/managed-by": "opzero-hub"}},
				"type": "kubernetes.io/tls", "data": data}}
			if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("creating Secret %s: %w", s.secret, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s: %w", s.secret, err)
		}
		get := func(k string) []byte {
			v, _, _ := unstructured.NestedString(u.Object, "data", k)
			b, _ := base64.StdEncoding.DecodeString(v)
			return b
		}
		kp, perr := parsePair(get("tls.crt"), get("tls.key"), get("ca.crt"), "Secret "+s.secret.String())
		if perr == nil && s.fresh(kp.leaf) {
			return kp, nil
		}
		// Missing, unreadable, expiring or for other names: a new leaf
		// from the same CA when it is readable, else a new CA too.
		data, err := s.make(get("ca.crt"), get("ca.key"))
		if err != nil {
			return nil, err
		}
		_ = unstructured.SetNestedField(u.Object, data, "data")
		if _, err := ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("renewing the certificate in Secret %s: %w", s.secret, err)
		}
	}
	return nil, fmt.Errorf("Secret %s: kept changing while it was read and written", s.secret)
}

// fresh: the leaf serves every name for more than renewBefore.
func (s secretCerts) fresh(leaf *x509.Certificate) bool {
	for _, n := range s.names {
		if !slices.Contains(leaf.DNSNames, n) {
			return false
		}
	}
	return s.now().Add(renewBefore).Before(leaf.NotAfter)
}

// make returns the Secret's data: the CA given (if it parses and lasts
// longer than a leaf), else a new one, and a new leaf for s.names.
func (s secretCerts) make(caPEM, caKeyPEM []byte) (map[string]any, error) {
	now := s.now()
	ca, caKey, err := parseCA(caPEM, caKeyPEM)
	if err != nil || now.Add(leafValidity).After(ca.NotAfter) {
		caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "opzero-hub webhooks CA"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caValidity), IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		if ca, err = x509.ParseCertificate(der); err != nil {
			return nil, err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: s.names[0]}, DNSNames: s.names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(leafValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cb, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, err
	}
	enc := func(typ string, b []byte) string {
		return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}))
	}
	return map[string]any{"tls.crt": enc("CERTIFICATE", der), "tls.key": enc("EC PRIVATE KEY", kb),
		"ca.crt": enc("CERTIFICATE", ca.Raw), "ca.key": enc("EC PRIVATE KEY", cb)}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func parseCA(caPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("no CA")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

func parsePair(crt, key, caPEM []byte, source string) (*keyPair, error) {
	c, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &keyPair{cert: &c, leaf: leaf, caPEM: caPEM, source: source}, nil
}

// servingCert holds the current certificate for the TLS server.
type servingCert struct {
	mu  sync.RWMutex
	cur *keyPair
}

func (s *servingCert) get() *keyPair {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur
}

// set replaces the certificate; it reports whether it changed.
func (s *servingCert) set(kp *keyPair) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.cur == nil || !bytes.Equal(s.cur.cert.Certificate[0], kp.cert.Certificate[0])
	s.cur = kp
	return changed
}

func (s *servingCert) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if kp := s.get(); kp != nil {
		return kp.cert, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// injectCABundle writes caPEM into the caBundle of every webhook of objs
// that calls the hub's Service svc and has another: a JSON patch per
// configuration that first tests each webhook's name at its index, so a
// configuration changed meanwhile is patched again on its next event.
func injectCABundle(ctx context.Context, dyn dynamic.Interface, objs []*unstructured.Unstructured, svc types.NamespacedName, caPEM []byte) []error {
	want := base64.StdEncoding.EncodeToString(caPEM)
	var errs []error
	for _, u := range objs {
		ws, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		var ops []map[string]any
		for i, w := range ws {
			m, _ := w.(map[string]any)
			cc, _ := m["clientConfig"].(map[string]any)
			sv, _ := cc["service"].(map[string]any)
			if sv == nil || sv["namespace"] != svc.Namespace || sv["name"] != svc.Name || cc["caBundle"] == want {
				continue
			}
			ops = append(ops, map[string]any{"op": "test", "path": fmt.Sprintf("/webhooks/%d/name", i), "value": m["name"]},
				map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": want})
		}
		if len(ops) == 0 {
			continue
		}
		patch, _ := json.Marshal(ops)
		gvr := mutatingConfigs
		if u.GetKind() == "ValidatingWebhookConfiguration" {
			gvr = validatingConfigs
		}
		if _, err := dyn.Resource(gvr).Patch(ctx, u.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "opzero-hub"}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("%s %s: writing the hub's CA into its caBundle: %w", u.GetKind(), u.GetName(), err))
		}
	}
	return errs
}
