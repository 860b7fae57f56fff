package dev

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opzero/opzero/internal/localport"
)

// Webhooks on a laptop. The API server calls a webhook at the Service its
// configuration names (Mutating/ValidatingWebhookConfiguration, a CRD's
// conversion): locally no Service routes to a process, so for each such
// Service that selects a Deployment dev runs (the --mode=webhooks
// Deployment `opzero manifests` writes), dev makes a CA and a serving
// certificate for 127.0.0.1, runs the process with its webhook server on a
// free local port and that certificate, and rewrites the clientConfigs, before
// they are applied, to https://127.0.0.1:<port><path> with the CA as
// caBundle. Stop deletes the webhook configurations it rewrote: the API
// server would otherwise refuse every write they match once the process
// is gone.

// The environment with which --mode=webhooks (operator/classic) moves its
// webhook server: as Knative gives PORT, dev gives these.
const (
	envWebhookPort    = "OPZERO_WEBHOOK_PORT"
	envWebhookCertDir = "OPZERO_WEBHOOK_CERT_DIR"
)

// webhookServer is a Deployment dev runs that serves webhooks.
type webhookServer struct {
	port int
	dir  string // tls.crt, tls.key
	ca   []byte // PEM
}

// webhookConfig is a webhook configuration dev rewrote (deleted by Stop).
type webhookConfig struct{ obj *unstructured.Unstructured }

// clientConfigs returns the clientConfig maps of u (a webhook
// configuration's webhooks, a CRD's conversion webhook).
func clientConfigs(u *unstructured.Unstructured) []map[string]any {
	switch {
	case isKind(u, "admissionregistration.k8s.io", "MutatingWebhookConfiguration"), isKind(u, "admissionregistration.k8s.io", "ValidatingWebhookConfiguration"):
		ws, _ := u.Object["webhooks"].([]any) // not NestedSlice: a copy
		var out []map[string]any
		for _, w := range ws {
			m, _ := w.(map[string]any)
			if cc, ok := m["clientConfig"].(map[string]any); ok {
				out = append(out, cc)
			}
		}
		return out
	case isKind(u, "apiextensions.k8s.io", "CustomResourceDefinition"):
		spec, _ := u.Object["spec"].(map[string]any)
		conv, _ := spec["conversion"].(map[string]any)
		wh, _ := conv["webhook"].(map[string]any)
		if cc, ok := wh["clientConfig"].(map[string]any); ok {
			return []map[string]any{cc}
		}
	}
	return nil
}

// planWebhooks finds the Deployments behind webhook Services, makes their
// certificates and ports, and rewrites the clientConfigs that name them.
func (p *Platform) planWebhooks() error {
	for _, u := range p.opts.Objects {
		for _, cc := range clientConfigs(u) {
			svc, ok := cc["service"].(map[string]any)
			if !ok {
				continue
			}
			name, _ := svc["name"].(string)
			ns, _ := svc["namespace"].(string)
			path, _ := svc["path"].(string)
			dep, err := p.webhookDeployment(ns, name)
			if err != nil {
				return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
			if dep == nil {
				p.say("%s %s: its webhook Service %s/%s selects no Deployment dev runs: the API server cannot call it here", u.GetKind(), u.GetName(), ns, name)
				continue
			}
			ws, err := p.webhookServerOf(dep)
			if err != nil {
				return err
			}
			delete(cc, "service")
			cc["url"] = fmt.Sprintf("https://127.0.0.1:%d%s", ws.port, path)
			cc["caBundle"] = base64.StdEncoding.EncodeToString(ws.ca)
			if !isKind(u, "apiextensions.k8s.io", "CustomResourceDefinition") {
				p.webhookConfigs = append(p.webhookConfigs, webhookConfig{u})
			}
		}
	}
	return p.issueCertificates()
}

// issueCertificates plays cert-manager, which the local control plane
// does not run: each Certificate's Secret (spec.secretName) is made by dev
// with a new CA and a serving certificate for its spec.dnsNames and
// 127.0.0.1 (tls.crt, tls.key, ca.crt, as cert-manager writes them) and
// applied in its place, where an unchanged operator's pods mount it (and
// the hub reads its ca.crt to check the operator); Issuers and
// Certificates are not applied. The webhook servers dev runs itself
// (`opzero manifests --webhook-certs=cert-manager`) get dev's own
// certificate as before. A new slice: the caller's stays whole.
func (p *Platform) issueCertificates() error {
	var keep []*unstructured.Unstructured
	for _, u := range p.opts.Objects {
		switch {
		case isKind(u, "cert-manager.io", "Issuer"), isKind(u, "cert-manager.io", "ClusterIssuer"):
			p.say("%s %s: not applied: dev issues the Certificates itself", u.GetKind(), key(u))
			continue
		case isKind(u, "cert-manager.io", "Certificate"):
			secret, _, _ := unstructured.NestedString(u.Object, "spec", "secretName")
			names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "dnsNames")
			if secret == "" {
				return fmt.Errorf("Certificate %s has no spec.secretName: cert-manager would refuse it too", key(u))
			}
			ca, crt, k, err := localCert(append([]string{"localhost"}, names...))
			if err != nil {
				return fmt.Errorf("Certificate %s: %w", key(u), err)
			}
			ns := orDefault(u.GetNamespace(), p.opts.Namespace)
			sec := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
				"metadata": map[string]any{"namespace": ns, "name": secret,
					"annotations": map[string]any{"cert-manager.io/certificate-name": u.GetName(), "dev.opzero.dev/issued": "true"}},
				"data": map[string]any{"tls.crt": base64.StdEncoding.EncodeToString(crt), "tls.key": base64.StdEncoding.EncodeToString(k),
					"ca.crt": base64.StdEncoding.EncodeToString(ca)}}}
			if p.issued == nil {
				p.issued = map[string]map[string][]byte{}
			}
			p.issued[ns+"/"+secret] = map[string][]byte{"tls.crt": crt, "tls.key": k, "ca.crt": ca}
			keep = append(keep, sec)
			p.say("Certificate %s: not applied (no cert-manager here): dev issued Secret %s/%s itself (%s and 127.0.0.1)", key(u), ns, secret, strings.Join(names, ", "))
			continue
		}
		keep = append(keep, u)
	}
	p.opts.Objects = keep
	return nil
}

// mountIssued gives a process dev runs the Secrets dev issued that its
// container mounts: their files in a local folder, and every argument
// naming the mount path (kubebuilder's
// --webhook-cert-path=/tmp/k8s-webhook-server/serving-certs) pointed at
// it. Other Secret volumes are not mounted (said once).
func (p *Platform) mountIssued(u *unstructured.Unstructured, c map[string]any, args ...[]string) error {
	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
	secrets := map[string]string{} // volume -> Secret
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if s, ok := m["secret"].(map[string]any); ok {
			n, _ := m["name"].(string)
			secrets[n], _ = s["secretName"].(string)
		}
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, mv := range mounts {
		m, _ := mv.(map[string]any)
		n, _ := m["name"].(string)
		path, _ := m["mountPath"].(string)
		secret, ok := secrets[n]
		if !ok || path == "" {
			continue
		}
		ns := orDefault(u.GetNamespace(), p.opts.Namespace)
		files := p.issued[ns+"/"+secret]
		if files == nil {
			continue
		}
		dir := filepath.Join(p.opts.Dir, "secret-"+ns+"-"+secret)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		for f, b := range files {
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
				return err
			}
		}
		named := false
		for _, a := range args {
			for i := range a {
				if strings.Contains(a[i], path) {
					a[i], named = strings.ReplaceAll(a[i], path, dir), true
				}
			}
		}
		if !named {
			p.say("Deployment %s: Secret %s is mounted at %s, which no argument names: the process does not find it there (dev wrote its files to %s)", key(u), secret, path, dir)
		}
	}
	return nil
}

// webhookDeployment is the Deployment dev runs (ko:// image or local
// command) that the Service ns/name selects; nil if none.
func (p *Platform) webhookDeployment(ns, name string) (*unstructured.Unstructured, error) {
	var svc *unstructured.Unstructured
	for _, u := range p.opts.Objects {
		if u.GetAPIVersion() == "v1" && u.GetKind() == "Service" && u.GetName() == name && orDefault(u.GetNamespace(), p.opts.Namespace) == ns {
			svc = u
		}
	}
	if svc == nil {
		return nil, nil
	}
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if len(sel) == 0 {
		return nil, nil
	}
	for _, u := range p.opts.Objects {
		if !isKind(u, "apps", "Deployment") || orDefault(u.GetNamespace(), p.opts.Namespace) != ns {
			continue
		}
		l, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
		if !labels.SelectorFromSet(sel).Matches(labels.Set(l)) {
			continue
		}
		_, ko, err := deploymentImage(u)
		if err != nil {
			return nil, err
		}
		if ko {
			return u, nil
		}
	}
	return nil, nil
}

// webhookServerOf is dep's port and certificate, made once.
func (p *Platform) webhookServerOf(dep *unstructured.Unstructured) (*webhookServer, error) {
	k := key(dep)
	if ws := p.webhookServers[k]; ws != nil {
		return ws, nil
	}
	port, err := localport.Free()
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: a local port for its webhook server: %w", k, err)
	}
	dir := filepath.Join(p.opts.Dir, "webhook-certs-"+strings.ReplaceAll(k, "/", "-"))
	ca, err := writeLocalCert(dir)
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: its webhook certificate: %w", k, err)
	}
	ws := &webhookServer{port: port, dir: dir, ca: ca}
	if p.webhookServers == nil {
		p.webhookServers = map[string]*webhookServer{}
	}
	p.webhookServers[k] = ws
	return ws, nil
}

// webhookProcess is what a Deployment that serves webhooks is run with:
// its env, and its arguments with every Secret volume's mountPath (the
// certificate's, e.g. --webhook-cert-path=/tmp/k8s-webhook-server/serving-certs)
// replaced by the local folder.
func (p *Platform) webhookProcess(u *unstructured.Unstructured, c map[string]any, argv []string) (env []string, _ *webhookServer) {
	ws := p.webhookServers[key(u)]
	if ws == nil {
		return nil, nil
	}
	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
	secret := map[string]bool{}
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if _, ok := m["secret"]; ok {
			n, _ := m["name"].(string)
			secret[n] = true
		}
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, mv := range mounts {
		m, _ := mv.(map[string]any)
		n, _ := m["name"].(string)
		path, _ := m["mountPath"].(string)
		if !secret[n] || path == "" {
			continue
		}
		for i := range argv {
			argv[i] = strings.ReplaceAll(argv[i], path, ws.dir)
		}
	}
	return []string{fmt.Sprintf("%s=%d", envWebhookPort, ws.port), envWebhookCertDir + "=" + ws.dir}, ws
}

// waitServing waits until ws answers TLS with its certificate, so that
// Start returns with the webhooks in force.
func (ws *webhookServer) waitServing(ctx context.Context, what string, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ws.ca)
	addr := fmt.Sprintf("127.0.0.1:%d", ws.port)
	deadline := time.Now().Add(timeout)
	for {
		d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: its webhook server did not answer TLS on %s within %s: %w", what, addr, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deleteWebhookConfigs deletes the webhook configurations dev rewrote.
func (p *Platform) deleteWebhookConfigs() {
	if len(p.webhookConfigs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range p.webhookConfigs {
		ri, err := p.apply.resource(w.obj)
		if err == nil {
			err = ri.Delete(ctx, w.obj.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			p.say("%s %s: could not delete it (%v): the API server still calls this session's webhook URL", w.obj.GetKind(), w.obj.GetName(), err)
		}
	}
}

// writeLocalCert writes a serving certificate for 127.0.0.1 and localhost,
// signed by a new CA, as tls.crt and tls.key in dir; it returns the CA.
func writeLocalCert(dir string) ([]byte, error) {
	ca, crt, key, err := localCert([]string{"localhost"})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

// localCert makes a new CA and a serving certificate it signs for
// 127.0.0.1 and dnsNames, valid 30 days; all PEM.
func localCert(dnsNames []string) (caPEM, crtPEM, keyPEM []byte, _ error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "opzero dev webhooks CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: dnsNames,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}
