package admission

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
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
				r = &route{operator: op, audience: aud, path: rest}
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
