package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/controllergen"
	"github.com/opzero/opzero/internal/description"
)

// The webhooks side of an adopted project whose binary registers webhooks
// (description.Webhooks): the same image with --mode=webhooks as an
// always-on Deployment, its Service, its serving certificate, and the
// webhook configurations (from the project's +kubebuilder:webhook markers,
// read by `controller-gen webhook`) and CRD conversion pointing at that Service.

// How the webhooks' serving certificate is made (Options.WebhookCerts).
const (
	// CertsSecret: opzero manifests makes a CA and a certificate into a
	// Secret and writes the CA into every caBundle (no dependency).
	CertsSecret = "secret"
	// CertsCertManager: a self-signed cert-manager Issuer and a Certificate
	// into the same Secret; cert-manager's CA injector fills the caBundles
	// (cert-manager.io/inject-ca-from).
	CertsCertManager = "cert-manager"
)

// The flags of a kubebuilder project's webhook server, and what the
// serverless binary is given to leave its webhooks out (kubebuilder's
// main registers them unless ENABLE_WEBHOOKS=false).
const (
	projectCertPathFlag = "webhook-cert-path"
	enableWebhooksEnv   = "ENABLE_WEBHOOKS"
	// defaultCertDir is controller-runtime's default CertDir in a container
	// (os.TempDir() is /tmp there).
	defaultCertDir = "/tmp/k8s-webhook-server/serving-certs"
	// webhookServicePort is the webhooks Service's port.
	webhookServicePort = 443
)

// WebhookMarkers runs `controller-gen webhook` on the Go packages pkgs
// (resolved in dir): the webhooks their +kubebuilder:webhook markers
// declare, as controller-gen writes them to config/webhook/manifests.yaml.
func WebhookMarkers(dir string, pkgs ...string) ([]admissionregv1.MutatingWebhook, []admissionregv1.ValidatingWebhook, error) {
	if len(pkgs) == 0 {
		return nil, nil, nil
	}
	files, err := controllergen.Generate(context.Background(), dir, "webhook", pkgs...)
	if err != nil {
		return nil, nil, fmt.Errorf("reading +kubebuilder:webhook markers in %s: %w", strings.Join(pkgs, ", "), err)
	}
	var mut []admissionregv1.MutatingWebhook
	var val []admissionregv1.ValidatingWebhook
	err = eachObject(files, func(_, kind string, raw []byte) error {
		switch kind {
		case "MutatingWebhookConfiguration":
			var c admissionregv1.MutatingWebhookConfiguration
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			mut = append(mut, c.Webhooks...)
		case "ValidatingWebhookConfiguration":
			var c admissionregv1.ValidatingWebhookConfiguration
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			val = append(val, c.Webhooks...)
		}
		return nil
	})
	return mut, val, err
}

// webhookPath is where a marker's webhook is called ("" with url=).
func webhookPath(cc admissionregv1.WebhookClientConfig) string {
	if cc.Service == nil || cc.Service.Path == nil {
		return ""
	}
	return *cc.Service.Path
}

// checkWebhooks matches the binary's webhooks with the markers: each path
// it registers must be in a marker (else the API server never calls it),
// each marker's path must be registered (else every call fails), and the
// operator's env must not turn them on in the serverless binary.
func (g *gen) checkWebhooks() error {
	w := g.in.Webhooks
	if w == nil {
		return nil
	}
	switch v, ok := envLiteral(g.env, enableWebhooksEnv); {
	case ok && g.viaHub() && v == "false":
		return fmt.Errorf("--env %s=false: the serverless Service serves the binary's webhooks (the hub forwards the API server's calls to it, --webhooks=%s); drop it, or keep them in an always-on Deployment with --webhooks=%s", enableWebhooksEnv, WebhooksHub, WebhooksAlwaysOn)
	case ok && g.o.Mode != Classic && !g.viaHub() && v != "false":
		return fmt.Errorf("--env %s=%s: the binary registers webhooks, which the serverless Service must leave out with --webhooks=%s (opzero manifests gives it %s=false); drop it", enableWebhooksEnv, v, WebhooksAlwaysOn, enableWebhooksEnv)
	case ok && g.o.Mode == Classic && v == "false":
		return fmt.Errorf("--env %s=false: the classic operator serves the binary's webhooks itself; drop it", enableWebhooksEnv)
	}
	marked := map[string]string{} // path -> the marker's webhook name
	check := func(name string, cc admissionregv1.WebhookClientConfig) error {
		p := webhookPath(cc)
		if p == "" {
			return fmt.Errorf("+kubebuilder:webhook marker %s%s has url= and no path: opzero manifests points the webhooks at the hub (or the Service of a --mode=webhooks Deployment) at the path the binary registers; give it path= instead", name, g.markerFile(name))
		}
		if !slices.Contains(w.Paths, p) {
			return fmt.Errorf("+kubebuilder:webhook marker %s%s names path=%s, which the binary does not register on its webhook server (it registers %s%s): the API server would get 404s; correct the path or drop the marker; nothing written",
				name, g.markerFile(name), p, orNone(w.Paths), g.registeringFiles())
		}
		marked[p] = name
		return nil
	}
	for _, m := range g.in.Mutating {
		if err := check(m.Name, m.ClientConfig); err != nil {
			return err
		}
	}
	for _, v := range g.in.Validating {
		if err := check(v.Name, v.ClientConfig); err != nil {
			return err
		}
	}
	for _, p := range w.Paths {
		if at := g.in.WebhookSources.Attached[p]; marked[p] == "" && at != "" {
			return fmt.Errorf("the binary registers the webhook %s, and the +kubebuilder:webhook marker naming path=%s at %s is in the doc comment of the declaration below it (no blank line between them): "+
				"controller-gen reads webhook markers only from comments that stand alone, so it ignores this one; put a blank line after the marker (kubebuilder writes it so); nothing written", p, p, at)
		}
		if marked[p] == "" {
			return fmt.Errorf("the binary registers the webhook %s%s, and no +kubebuilder:webhook marker in its packages names path=%s, so its path cannot be discovered and no webhook configuration would send the API server there; "+
				"add the marker kubebuilder writes above the webhook (e.g. // +kubebuilder:webhook:path=%s,mutating=...,failurePolicy=fail,sideEffects=None,groups=...,resources=...,verbs=create;update,versions=...,name=...,admissionReviewVersions=v1), "+
				"or a webhook configuration naming that path in config/webhook, or give the rendered chart that holds it with --project-manifests; nothing written", p, g.registeringFiles(), p, p)
		}
	}
	return nil
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

// envLiteral is the literal value of variable name in env.
func envLiteral(env []description.EnvVar, name string) (string, bool) {
	for _, e := range env {
		if e.Name == name && e.Secret == nil {
			return e.Value, true
		}
	}
	return "", false
}

func (g *gen) webhooksName() string { return g.name() + "-webhooks" }
func (g *gen) certName() string     { return g.name() + "-webhooks-cert" }

// webhookDNSNames are the webhooks Service's names in the cluster.
func (g *gen) webhookDNSNames() []string {
	s, ns := g.webhooksName(), g.o.Namespace
	return []string{s + "." + ns + ".svc", s + "." + ns + ".svc.cluster.local", s + "." + ns, s}
}

func (g *gen) certDir() string {
	if d := g.in.Webhooks.CertDir; strings.HasPrefix(d, "/") {
		return d
	}
	return defaultCertDir
}

func (g *gen) certManager() bool { return g.o.WebhookCerts == CertsCertManager }

// webhookCert is Options.WebhookCert if it still serves the Service's
// names for 30 days, else a new one.
func (g *gen) webhookCert() (WebhookCert, error) {
	names := g.webhookDNSNames()
	if c := g.o.WebhookCert; c != nil && c.check(names, time.Now()) == nil {
		return *c, nil
	}
	return newWebhookCert(names, time.Now())
}

// webhooks are the webhooks side: Deployment (serverless; in classic mode
// the operator's Deployment serves them), Service, certificate, webhook
// configurations; and the CA bundle (nil with cert-manager, whose injector
// fills it).
func (g *gen) webhooks() ([]Object, []byte, error) {
	var ca []byte
	var objs []Object
	if !g.alwaysOnWebhooks() { // the hub serves them all: no certificate, Deployment or Service
		cfgs, err := g.webhookConfigurations(nil)
		return cfgs, nil, err
	}
	if g.certManager() {
		objs = append(objs, g.certManagerObjects()...)
	} else {
		c, err := g.webhookCert()
		if err != nil {
			return nil, nil, err
		}
		ca = c.CA
		sec := object("v1", "Secret", g.o.Namespace, g.certName(), g.labels("webhooks"))
		sec["type"] = "kubernetes.io/tls"
		sec["data"] = map[string]any{"tls.crt": c.Cert, "tls.key": c.Key, "ca.crt": c.CA} // []byte: base64 in YAML
		objs = append(objs, Object{File: FileWebhooks, Obj: sec})
	}
	if g.o.Mode != Classic {
		objs = append(objs, g.webhooksDeployment())
	}
	objs = append(objs, g.webhooksService())
	cfgs, err := g.webhookConfigurations(ca)
	if err != nil {
		return nil, nil, err
	}
	return append(objs, cfgs...), ca, nil
}

func (g *gen) clientConfig(path string, ca []byte) admissionregv1.WebhookClientConfig {
	port := int32(webhookServicePort)
	return admissionregv1.WebhookClientConfig{CABundle: ca,
		Service: &admissionregv1.ServiceReference{Namespace: g.o.Namespace, Name: g.webhooksName(), Path: &path, Port: &port}}
}

// webhookConfigurations are the markers' webhooks, pointed at the hub
// (hubwebhooks.go) or at the Service of the Deployment that serves them.
func (g *gen) webhookConfigurations(ca []byte) ([]Object, error) {
	name := "opzero-" + g.o.Namespace + "-" + g.name()
	meta := func(kind string) map[string]any {
		m := object("admissionregistration.k8s.io/v1", kind, "", name, g.labels("webhooks"))
		switch {
		case g.viaHub():
			g.hubWebhookMeta(m)
		case g.certManager():
			m["metadata"].(map[string]any)["annotations"] = map[string]any{"cert-manager.io/inject-ca-from": g.o.Namespace + "/" + g.certName()}
		}
		return m
	}
	cc := func(name string, c admissionregv1.WebhookClientConfig, timeout **int32) admissionregv1.WebhookClientConfig {
		if !g.viaHub() {
			return g.clientConfig(webhookPath(c), ca)
		}
		*timeout = g.withTimeout(name, *timeout)
		return g.hubClientConfig(webhookPath(c))
	}
	var objs []Object
	if g.viaHub() && len(g.in.Mutating)+len(g.in.Validating) > 0 {
		objs = append(objs, g.hubPatchRole(name))
	}
	if len(g.in.Mutating) > 0 {
		ws := make([]admissionregv1.MutatingWebhook, len(g.in.Mutating))
		for i, w := range g.in.Mutating {
			w.ClientConfig = cc(w.Name, w.ClientConfig, &w.TimeoutSeconds)
			ws[i] = w
		}
		o := meta("MutatingWebhookConfiguration")
		if err := setJSON(o, "webhooks", ws); err != nil {
			return nil, err
		}
		objs = append(objs, Object{File: FileWebhooks, Obj: o})
	}
	if len(g.in.Validating) > 0 {
		ws := make([]admissionregv1.ValidatingWebhook, len(g.in.Validating))
		for i, w := range g.in.Validating {
			w.ClientConfig = cc(w.Name, w.ClientConfig, &w.TimeoutSeconds)
			ws[i] = w
		}
		o := meta("ValidatingWebhookConfiguration")
		if err := setJSON(o, "webhooks", ws); err != nil {
			return nil, err
		}
		objs = append(objs, Object{File: FileWebhooks, Obj: o})
	}
	return objs, nil
}

// setJSON sets o[field] to v as plain maps and slices (v's JSON).
func setJSON(o map[string]any, field string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return err
	}
	o[field] = out
	return nil
}

// crdObject is a generated CRD as written: controller-gen's bytes, or for
// a kind the binary's /convert webhook converts, the CRD with its
// conversion webhook (then written from the object).
func (g *gen) crdObject(c GeneratedCRD, ca []byte) (Object, error) {
	o := Object{File: FileCRDs, Raw: c.YAML, Obj: object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", c.CRD.Name, nil)}
	if g.in.Webhooks == nil {
		return o, nil
	}
	i := slices.IndexFunc(g.in.Webhooks.Conversion, func(k description.ConversionKind) bool {
		return k.Group == c.CRD.Spec.Group && k.Kind == c.CRD.Spec.Names.Kind
	})
	if i < 0 {
		return o, nil
	}
	if len(c.CRD.Spec.Versions) < 2 {
		return o, fmt.Errorf("CRD %s: the binary's /convert webhook converts its kind, but controller-gen found %d version(s) of it (%s): "+
			"every version's Go package must be in the operator's module", c.CRD.Name, len(c.CRD.Spec.Versions), versionPackages(g.in.Webhooks.Conversion[i]))
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(bytes.TrimPrefix(c.YAML, []byte("---\n")), &obj); err != nil {
		return o, fmt.Errorf("CRD %s: %w", c.CRD.Name, err)
	}
	wh := map[string]any{"conversionReviewVersions": []any{"v1"}}
	if err := setJSON(wh, "clientConfig", g.clientConfig("/convert", ca)); err != nil {
		return o, err
	}
	spec, _ := obj["spec"].(map[string]any)
	spec["conversion"] = map[string]any{"strategy": "Webhook", "webhook": wh}
	if g.certManager() {
		meta := obj["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		ann["cert-manager.io/inject-ca-from"] = g.o.Namespace + "/" + g.certName()
		meta["annotations"] = ann
	}
	o.Obj, o.Raw = obj, nil
	return o, nil
}

func versionPackages(ck description.ConversionKind) string {
	var ps []string
	for _, v := range ck.Versions {
		ps = append(ps, v.Version+" in "+v.GoPackage)
	}
	sort.Strings(ps)
	return strings.Join(ps, ", ")
}

// certManagerObjects are a self-signed Issuer and the Certificate of the
// Service's names, into the Secret the Deployment mounts.
func (g *gen) certManagerObjects() []Object {
	l := g.labels("webhooks")
	iss := object("cert-manager.io/v1", "Issuer", g.o.Namespace, g.webhooksName()+"-selfsigned", l)
	iss["spec"] = map[string]any{"selfSigned": map[string]any{}}
	cert := object("cert-manager.io/v1", "Certificate", g.o.Namespace, g.certName(), l)
	var names []any
	for _, n := range g.webhookDNSNames() {
		names = append(names, n)
	}
	cert["spec"] = map[string]any{"dnsNames": names, "secretName": g.certName(),
		"issuerRef": map[string]any{"kind": "Issuer", "name": g.webhooksName() + "-selfsigned"}}
	return []Object{{File: FileWebhooks, Obj: iss}, {File: FileWebhooks, Obj: cert}}
}

// webhooksService is in front of the webhook server: of the webhooks
// Deployment, or in classic mode of the operator's.
func (g *gen) webhooksService() Object {
	component := "webhooks"
	if g.o.Mode == Classic {
		component = "operator"
	}
	svc := object("v1", "Service", g.o.Namespace, g.webhooksName(), g.labels("webhooks"))
	svc["spec"] = map[string]any{
		"selector": map[string]any{"app.kubernetes.io/name": g.op.Name, "app.kubernetes.io/component": component},
		"ports":    []any{map[string]any{"name": "https", "port": int64(webhookServicePort), "targetPort": "webhook-server"}},
	}
	return Object{File: FileWebhooks, Obj: svc}
}

// webhookServing is what a container serving the webhooks gets: the
// certificate's volume and mount, the port, and the project's cert flag.
func (g *gen) webhookServing(c map[string]any, args []any) []any {
	ports, _ := c["ports"].([]any)
	c["ports"] = append(ports, map[string]any{"name": "webhook-server", "containerPort": int64(g.in.Webhooks.Port)})
	c["volumeMounts"] = []any{map[string]any{"name": "webhook-cert", "mountPath": g.certDir(), "readOnly": true}}
	if g.hasFlag(projectCertPathFlag) {
		args = append(args, "--"+projectCertPathFlag+"="+g.certDir())
	}
	return args
}

func (g *gen) certVolume() []any {
	return []any{map[string]any{"name": "webhook-cert", "secret": map[string]any{"secretName": g.certName()}}}
}

// webhooksDeployment runs the operator's image with --mode=webhooks,
// always on, as the operator's service account (what a webhook reads, it
// reads with the operator's rights), without the env that would turn the
// webhooks off.
func (g *gen) webhooksDeployment() Object {
	l := g.labels("webhooks")
	sel := map[string]any{"app.kubernetes.io/name": g.op.Name, "app.kubernetes.io/component": "webhooks"}
	c := map[string]any{"name": "webhooks", "image": g.o.Image}
	args := g.webhookServing(c, []any{"--mode=webhooks"})
	if port, probeArgs := g.classicProbes(); port > 0 && (g.hasFlag(projectProbeFlag) || g.in.Probes != "") {
		args = append(args, probeArgs...)
		c["ports"] = append(c["ports"].([]any), map[string]any{"name": "probes", "containerPort": port})
		c["livenessProbe"] = httpProbe("/healthz", "probes", 3)
		c["readinessProbe"] = httpProbe("/readyz", "probes", 1)
	}
	wg := *g
	wg.env = slices.DeleteFunc(slices.Clone(g.env), func(e description.EnvVar) bool { return e.Name == enableWebhooksEnv })
	c = wg.container(c, args, []any{map[string]any{"name": "POD_NAMESPACE",
		"valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}}})
	dep := object("apps/v1", "Deployment", g.o.Namespace, g.webhooksName(), l)
	dep["spec"] = map[string]any{
		"replicas": int64(1),
		"selector": map[string]any{"matchLabels": sel},
		"template": map[string]any{
			"metadata": map[string]any{"labels": l},
			"spec": map[string]any{
				"serviceAccountName": g.name(),
				"containers":         []any{c},
				"volumes":            g.certVolume(),
			},
		},
	}
	return Object{File: FileWebhooks, Obj: dep}
}
