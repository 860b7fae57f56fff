package metacontroller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/description"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// Endpoint is where and how one hook is called.
type Endpoint struct {
	URL string
	// Timeout bounds one attempt (0: DefaultHookTimeout).
	Timeout time.Duration
	// TLS verifies the hook's server with the caBundle and presents the
	// clientTLS certificate; nil: the system's roots and no certificate.
	TLS *tls.Config
	// Authorization is the header authorization or basicAuth make; ""
	// sends HookClient.Token's bearer token, if it has one.
	Authorization string
	// Material identifies the TLS material (HookClient keeps one HTTP
	// client per host and material, so connections are reused).
	Material string
}

// credentials are a hook's TLS and credentials fields, from the webhook
// itself or from a controller's endpointConfigs entry (from says which).
type credentials struct {
	from          string
	caBundle      *v1alpha1.CABundle
	clientTLS     *v1alpha1.ClientTLS
	authorization *v1alpha1.Authorization
	basicAuth     *v1alpha1.BasicAuth
}

// endpoint resolves where and how the webhook w of c is called, as
// Metacontroller does: the webhook's own caBundle, clientTLS,
// authorization and basicAuth if it sets any of them (the endpointConfigs
// are then not consulted), else those of the first of c's endpointConfigs
// whose host matches the URL's. Secrets and ConfigMaps are read from the
// API server at each call (no cache), so a rotated credential is used at
// the next sync.
func (r *Reconciler) endpoint(ctx context.Context, c *Controller, w *v1alpha1.Webhook) (Endpoint, error) {
	u, timeout, err := r.hookURL(ctx, w)
	if err != nil {
		return Endpoint{}, err
	}
	ep := Endpoint{URL: u, Timeout: timeout}
	cr, err := credentialsFor(c, w, u)
	if err != nil || cr == nil {
		return ep, err
	}
	if err := r.resolve(ctx, cr, &ep); err != nil {
		return Endpoint{}, fmt.Errorf("%s: %w", cr.from, err)
	}
	return ep, nil
}

func credentialsFor(c *Controller, w *v1alpha1.Webhook, hookURL string) (*credentials, error) {
	if w.CABundle != nil || w.ClientTLS != nil || w.Authorization != nil || w.BasicAuth != nil {
		return &credentials{from: "the webhook's own caBundle, clientTLS, authorization or basicAuth",
			caBundle: w.CABundle, clientTLS: w.ClientTLS, authorization: w.Authorization, basicAuth: w.BasicAuth}, nil
	}
	if len(c.Endpoints) == 0 {
		return nil, nil
	}
	pu, err := url.Parse(hookURL)
	if err != nil {
		return nil, fmt.Errorf("hook URL %q: %w", hookURL, err)
	}
	for i, e := range c.Endpoints {
		if hostMatches(e.Host, pu) {
			return &credentials{from: fmt.Sprintf("endpointConfigs entry %d (host %s)", i, e.Host),
				caBundle: e.CABundle, clientTLS: e.ClientTLS, authorization: e.Authorization, basicAuth: e.BasicAuth}, nil
		}
	}
	return nil, nil
}

// hostMatches: host is the URL's host:port or host (case-insensitive); a
// host without a port matches the scheme's default port and the reverse.
func hostMatches(host string, u *url.URL) bool {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	h, p, err := net.SplitHostPort(host)
	if err != nil { // no port
		h, p = host, map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	return strings.EqualFold(h, u.Hostname()) && p == port
}

func (r *Reconciler) resolve(ctx context.Context, cr *credentials, ep *Endpoint) error {
	if cr.authorization != nil && cr.basicAuth != nil {
		return errors.New("authorization and basicAuth are both set: they exclude each other")
	}
	var material []string
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if b := cr.caBundle; b != nil {
		pem, err := r.caBundle(ctx, b)
		if err != nil {
			return fmt.Errorf("caBundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("caBundle: no PEM certificate in it")
		}
		cfg.RootCAs = pool
		material = append(material, string(pem))
	}
	if t := cr.clientTLS; t != nil {
		cert, err := r.key(ctx, "Secret", t.SecretRef.Namespace, t.SecretRef.Name, or(t.CertKey, "tls.crt"))
		if err != nil {
			return fmt.Errorf("clientTLS: %w", err)
		}
		key, err := r.key(ctx, "Secret", t.SecretRef.Namespace, t.SecretRef.Name, or(t.PrivateKeyKey, "tls.key"))
		if err != nil {
			return fmt.Errorf("clientTLS: %w", err)
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("clientTLS: Secret %s/%s: %w", t.SecretRef.Namespace, t.SecretRef.Name, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		material = append(material, string(cert), string(key))
	}
	if material != nil {
		ep.TLS, ep.Material = cfg, strings.Join(material, "\x00")
	}
	switch a, b := cr.authorization, cr.basicAuth; {
	case a != nil:
		typ := strings.TrimSpace(a.Type)
		if strings.EqualFold(typ, "basic") {
			return errors.New("authorization type Basic: use basicAuth (a user name and password)")
		}
		v, err := r.key(ctx, "Secret", a.SecretRef.Namespace, a.SecretRef.Name, a.SecretRef.Key)
		if err != nil {
			return fmt.Errorf("authorization: %w", err)
		}
		ep.Authorization = or(typ, "Bearer") + " " + strings.TrimSpace(string(v))
	case b != nil:
		user, err := r.key(ctx, "Secret", b.SecretRef.Namespace, b.SecretRef.Name, or(b.UsernameKey, "username"))
		if err != nil {
			return fmt.Errorf("basicAuth: %w", err)
		}
		pass, err := r.key(ctx, "Secret", b.SecretRef.Namespace, b.SecretRef.Name, or(b.PasswordKey, "password"))
		if err != nil {
			return fmt.Errorf("basicAuth: %w", err)
		}
		ep.Authorization = "Basic " + base64.StdEncoding.EncodeToString([]byte(strings.TrimSpace(string(user))+":"+strings.TrimSpace(string(pass))))
	}
	return nil
}

func (r *Reconciler) caBundle(ctx context.Context, b *v1alpha1.CABundle) ([]byte, error) {
	n := 0
	for _, set := range []bool{b.Inline != nil, b.SecretRef != nil, b.ConfigMapRef != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, fmt.Errorf("%d of inline, secretRef, configMapRef are set: want exactly one", n)
	case b.Inline != nil:
		return []byte(*b.Inline), nil
	case b.SecretRef != nil:
		return r.key(ctx, "Secret", b.SecretRef.Namespace, b.SecretRef.Name, or(b.SecretRef.Key, "ca.crt"))
	}
	return r.key(ctx, "ConfigMap", b.ConfigMapRef.Namespace, b.ConfigMapRef.Name, or(b.ConfigMapRef.Key, "ca.crt"))
}

// key reads one key of a Secret or ConfigMap, from the API server: an
// unstructured read, which classic's cached client does not cache (no
// informer on every Secret of the cluster, and only get is needed: the
// role `opzero manifests` writes grants it on these names).
func (r *Reconciler) key(ctx context.Context, kind, ns, name, key string) ([]byte, error) {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	o.SetKind(kind)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
		// %v, not %w: a missing Secret is the hook's failure, to retry,
		// not the parent's not-found that ends a sync
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("reading %s %s/%s: %v; grant the operator get on it (opzero manifests does for the names the controllers' files give)", kind, ns, name, err)
		}
		return nil, fmt.Errorf("reading %s %s/%s: %v", kind, ns, name, err)
	}
	if s, ok, _ := unstructured.NestedString(o.Object, "data", key); ok {
		if kind == "ConfigMap" {
			return []byte(s), nil
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s key %s: %w", kind, ns, name, key, err)
		}
		return b, nil
	}
	if s, ok, _ := unstructured.NestedString(o.Object, "binaryData", key); ok && kind == "ConfigMap" {
		return base64.StdEncoding.DecodeString(s)
	}
	return nil, fmt.Errorf("%s %s/%s has no key %q", kind, ns, name, key)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// credentialRules are the RBAC the controllers' TLS and credentials need:
// get on each Secret and ConfigMap they name (by name: a ClusterRole's
// resourceNames hold in every namespace), with a line saying so.
func credentialRules(cfg *Config) ([]description.Rule, []string) {
	var rules []description.Rule
	var why []string
	for _, kind := range []string{"secrets", "configmaps"} {
		names := map[string]bool{}
		var refs []string
		for _, c := range cfg.Controllers {
			for _, ref := range c.credentialRefs(kind) {
				names[ref[1]] = true
				refs = append(refs, ref[0]+"/"+ref[1])
			}
		}
		if len(names) == 0 {
			continue
		}
		rules = append(rules, description.Rule{APIGroups: []string{""}, Resources: []string{kind}, Verbs: []string{"get"}, ResourceNames: keys(names)})
		why = append(why, fmt.Sprintf("the controllers' hook TLS and credentials (endpointConfigs, caBundle, clientTLS, authorization, basicAuth) name %s %s: "+
			"the operator may get %s of those names (in any namespace: a ClusterRole's resourceNames), read at each hook call", kind, strings.Join(uniq(refs), ", "), kind))
	}
	return rules, why
}

// credentialRefs are the [namespace, name] of every Secret (kind
// "secrets") or ConfigMap ("configmaps") c's hooks' credentials name.
func (c *Controller) credentialRefs(kind string) [][2]string {
	var all []credentials
	for _, h := range []*v1alpha1.Hook{c.Sync, c.Finalize, c.Customize} {
		if h != nil && h.Webhook != nil {
			w := h.Webhook
			all = append(all, credentials{caBundle: w.CABundle, clientTLS: w.ClientTLS, authorization: w.Authorization, basicAuth: w.BasicAuth})
		}
	}
	for _, e := range c.Endpoints {
		all = append(all, credentials{caBundle: e.CABundle, clientTLS: e.ClientTLS, authorization: e.Authorization, basicAuth: e.BasicAuth})
	}
	var out [][2]string
	for _, cr := range all {
		if b := cr.caBundle; b != nil {
			if b.SecretRef != nil && kind == "secrets" {
				out = append(out, [2]string{b.SecretRef.Namespace, b.SecretRef.Name})
			}
			if b.ConfigMapRef != nil && kind == "configmaps" {
				out = append(out, [2]string{b.ConfigMapRef.Namespace, b.ConfigMapRef.Name})
			}
		}
		if kind != "secrets" {
			continue
		}
		if t := cr.clientTLS; t != nil {
			out = append(out, [2]string{t.SecretRef.Namespace, t.SecretRef.Name})
		}
		if a := cr.authorization; a != nil {
			out = append(out, [2]string{a.SecretRef.Namespace, a.SecretRef.Name})
		}
		if b := cr.basicAuth; b != nil {
			out = append(out, [2]string{b.SecretRef.Namespace, b.SecretRef.Name})
		}
	}
	return out
}

func uniq(in []string) []string {
	sort.Strings(in)
	return slices.Compact(in)
}
