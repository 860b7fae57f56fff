package admission

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The contract with `opzero manifests` (internal/manifests/hubwebhooks.go
// writes it): a webhook configuration served through the hub carries
// LabelViaHub, names its operator in AnnotationOperator (and the audience
// of its tokens in AnnotationAudience), and each of its webhooks calls the
// path
//
//	/admission/<namespace>/<operator>/<token>/<the project's webhook path>
//
// on the hub's Service (or, under `opzero dev`, a URL of that path).
const (
	LabelViaHub        = "opzero.dev/hub-webhooks"
	AnnotationOperator = "opzero.dev/operator"
	AnnotationAudience = "opzero.dev/audience"
	// AnnotationUpstream marks the configuration of an unchanged operator,
	// served by the hub through a Subscription whose sink is the
	// operator's own Deployment (AnnotationOperator names the
	// Subscription): it is the operator's own webhook Service,
	// <name>[:<port>] (port 443 by default) in the Subscription's
	// namespace. The hub wakes the Deployment, waits for a ready pod and
	// calls it at the Service port's targetPort over TLS, checking the
	// certificate against AnnotationUpstreamCA or the ca.crt of
	// AnnotationUpstreamCASecret for <name>.<namespace>.svc. It sends no
	// token: the operator checks nothing of the hub's.
	AnnotationUpstream = "opzero.dev/upstream-service"
	// AnnotationUpstreamCA is the PEM CA (base64, as a caBundle) that
	// signed the unchanged operator's serving certificate.
	AnnotationUpstreamCA = "opzero.dev/upstream-ca-bundle"
	// AnnotationUpstreamCASecret names a Secret of the Subscription's
	// namespace whose ca.crt signed it (the Secret of cert-manager's
	// Certificate for the webhook Service, as kubebuilder's config/certmanager
	// makes it), read again each minute.
	AnnotationUpstreamCASecret = "opzero.dev/upstream-ca-secret"
	// PathPrefix starts every path the hub serves admission on.
	PathPrefix = "/admission/"
	// defaultTimeout is the API server's default timeoutSeconds.
	defaultTimeout = 10 * time.Second
)

// Path is the hub path of webhook path p (from the project's marker) of
// operator ns/name, with the install's token.
func Path(ns, name, token, p string) string {
	return PathPrefix + ns + "/" + name + "/" + token + "/" + strings.TrimPrefix(p, "/")
}

// route is what one hub path forwards to and what it may carry: the rules
// of every webhook that calls it (usually one).
type route struct {
	operator types.NamespacedName // the Knative Service
	audience string
	path     string // the operator's own webhook path
	webhooks []string
	rules    []admissionregv1.RuleWithOperations
	timeout  time.Duration // the longest timeoutSeconds of its webhooks
	// upstream, for an unchanged operator, is its own webhook Service
	// (operator is then its Subscription); nil for a Knative Service.
	upstream *upstream
}

// upstream is an unchanged operator's webhook Service (AnnotationUpstream).
type upstream struct {
	service  types.NamespacedName
	port     int32
	caPEM    []byte // AnnotationUpstreamCA, or
	caSecret string // AnnotationUpstreamCASecret, in service's namespace
}

// parseUpstream reads an unchanged operator's annotations; nil when the
// configuration has none (a Knative Service's).
func parseUpstream(ann map[string]string, ns string) (*upstream, error) {
	v, ok := ann[AnnotationUpstream]
	if !ok {
		return nil, nil
	}
	name, port := v, int32(443)
	if n, p, found := strings.Cut(v, ":"); found {
		i, err := strconv.ParseInt(p, 10, 32)
		if err != nil || i <= 0 || i > 65535 {
			return nil, fmt.Errorf("annotation %s=%q: the port is not a number from 1 to 65535", AnnotationUpstream, v)
		}
		name, port = n, int32(i)
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("annotation %s=%q: not <Service name>[:<port>] of the Subscription's namespace (%s)", AnnotationUpstream, v, strings.Join(errs, "; "))
	}
	u := &upstream{service: types.NamespacedName{Namespace: ns, Name: name}, port: port, caSecret: ann[AnnotationUpstreamCASecret]}
	if b64 := ann[AnnotationUpstreamCA]; b64 != "" {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || !x509.NewCertPool().AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("annotation %s: not a base64 PEM certificate", AnnotationUpstreamCA)
		}
		u.caPEM = b
	}
	if (u.caPEM == nil) == (u.caSecret == "") {
		return nil, fmt.Errorf("annotation %s needs exactly one of %s (the CA, base64 PEM) and %s (a Secret of namespace %s with ca.crt) to check the operator's certificate",
			AnnotationUpstream, AnnotationUpstreamCA, AnnotationUpstreamCASecret, ns)
	}
	return u, nil
}

// table maps hub paths to routes; it is replaced whole, never changed.
type table map[string]*route

// parsePath splits a hub path into operator and the operator's path.
func parsePath(p string) (op types.NamespacedName, token, rest string, ok bool) {
	s, found := strings.CutPrefix(p, PathPrefix)
	if !found {
		return op, "", "", false
	}
	parts := strings.SplitN(s, "/", 4)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return op, "", "", false
	}
	return types.NamespacedName{Namespace: parts[0], Name: parts[1]}, parts[2], "/" + parts[3], true
}

// config is a webhook configuration as the table reads it.
type config struct {
	kind, name  string
	annotations map[string]string
	webhooks    []webhook
}

type webhook struct {
	name    string
	cc      admissionregv1.WebhookClientConfig
	rules   []admissionregv1.RuleWithOperations
	timeout *int32
}

func fromMutating(c *admissionregv1.MutatingWebhookConfiguration) config {
	out := config{kind: "MutatingWebhookConfiguration", name: c.Name, annotations: c.Annotations}
	for _, w := range c.Webhooks {
		out.webhooks = append(out.webhooks, webhook{name: w.Name, cc: w.ClientConfig, rules: w.Rules, timeout: w.TimeoutSeconds})
	}
	return out
}

func fromValidating(c *admissionregv1.ValidatingWebhookConfiguration) config {
	out := config{kind: "ValidatingWebhookConfiguration", name: c.Name, annotations: c.Annotations}
	for _, w := range c.Webhooks {
		out.webhooks = append(out.webhooks, webhook{name: w.Name, cc: w.ClientConfig, rules: w.Rules, timeout: w.TimeoutSeconds})
	}
	return out
}

// callPath is the path the API server calls for cc, if it calls the hub:
// the hub's Service (svc), or a URL (opzero dev points webhooks at the
// hub's local port).
func callPath(cc admissionregv1.WebhookClientConfig, svc types.NamespacedName) (string, bool) {
	switch {
	case cc.Service != nil:
		if cc.Service.Namespace != svc.Namespace || cc.Service.Name != svc.Name || cc.Service.Path == nil {
			return "", false
		}
		return *cc.Service.Path, true
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", false
		}
		return u.Path, true
	}
	return "", false
}

// buildTable derives the routes from the configurations; what does not
// fit the contract is skipped with a reason (logged by the caller).
func buildTable(cfgs []config, svc types.NamespacedName) (table, []string) {
	t := table{}
	var skipped []string
	for _, c := range cfgs {
		ns, name, ok := strings.Cut(c.annotations[AnnotationOperator], "/")
		if !ok || ns == "" || name == "" {
			skipped = append(skipped, fmt.Sprintf("%s %s: annotation %s=%q is not <namespace>/<operator>: its webhooks are not served",
				c.kind, c.name, AnnotationOperator, c.annotations[AnnotationOperator]))
			continue
		}
		declared := types.NamespacedName{Namespace: ns, Name: name}
		up, err := parseUpstream(c.annotations, ns)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s %s: %v: its webhooks are not served", c.kind, c.name, err))
			continue
		}
		for _, w := range c.webhooks {
			p, ok := callPath(w.cc, svc)
			if !ok {
				continue // not ours (a webhook of the configuration served elsewhere)
			}
			op, _, rest, ok := parsePath(p)
			if !ok {
				skipped = append(skipped, fmt.Sprintf("%s %s: webhook %s calls %q, not %s<namespace>/<operator>/<token>/<path>: not served", c.kind, c.name, w.name, p, PathPrefix))
				continue
			}
			if op != declared {
				// One operator's configuration cannot route to another's Service.
				skipped = append(skipped, fmt.Sprintf("%s %s: webhook %s calls operator %s but the configuration is operator %s's (%s): not served", c.kind, c.name, w.name, op, declared, AnnotationOperator))
				continue
			}
			r := t[p]
			if r == nil {
				aud := c.annotations[AnnotationAudience]
				if aud == "" {
					aud = "opzero:" + op.Namespace + ":" + op.Name
				}
				r = &route{operator: op, audience: aud, path: rest, upstream: up}
				t[p] = r
			}
			r.webhooks = append(r.webhooks, w.name)
			r.rules = append(r.rules, w.rules...)
			timeout := defaultTimeout
			if w.timeout != nil && *w.timeout > 0 {
				timeout = time.Duration(*w.timeout) * time.Second
			}
			r.timeout = max(r.timeout, timeout)
		}
	}
	return t, skipped
}

// allows says whether the route's webhooks declare req's operation on
// its resource: only then may the request reach the operator. The API
// server sends the resource a rule matched (with matchPolicy Equivalent,
// converted to it), so the request's own resource is checked.
func (r *route) allows(req *admissionv1.AdmissionRequest) bool {
	for _, rule := range r.rules {
		if ruleMatches(rule, req) {
			return true
		}
	}
	return false
}

func ruleMatches(rule admissionregv1.RuleWithOperations, req *admissionv1.AdmissionRequest) bool {
	op := admissionregv1.OperationType(req.Operation)
	if !slices.Contains(rule.Operations, op) && !slices.Contains(rule.Operations, admissionregv1.OperationAll) {
		return false
	}
	if !matchesAny(rule.APIGroups, req.Resource.Group) || !matchesAny(rule.APIVersions, req.Resource.Version) {
		return false
	}
	return slices.ContainsFunc(rule.Resources, func(pattern string) bool { return resourceMatches(pattern, req.Resource.Resource, req.SubResource) })
}

func matchesAny(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// resourceMatches is the API server's rule matching of a resource
// (admissionregistration v1 Rule.Resources): "pods" (no subresource),
// "pods/status", "*" (every resource, no subresource), "*/*", "pods/*",
// "*/status".
func resourceMatches(pattern, resource, sub string) bool {
	res, subPattern, hasSub := strings.Cut(pattern, "/")
	if res != "*" && res != resource {
		return false
	}
	if !hasSub {
		return sub == ""
	}
	return subPattern == "*" || subPattern == sub
}
