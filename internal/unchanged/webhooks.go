package unchanged

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opzero/opzero/internal/hub/admission"
)

// certManagerInject is cert-manager's cainjector annotation: it writes the
// CA of a Certificate (<namespace>/<name>) into the caBundles.
const certManagerInject = "cert-manager.io/inject-ca-from"

// webhookTargets are what the rewritten webhook configurations need of
// the hub: the operator's Services and CA Secrets it reads, and the
// configurations whose caBundles it writes.
type webhookTargets struct {
	services, secrets []string
	mutating          []string
	validating        []string
}

// viaHub rewrites each admission webhook configuration of the input that
// calls the Deployment's pods (through a Service of its namespace that
// selects them) so that the API server calls the hub instead, which wakes
// the Deployment and forwards the call to the same Service's pods (package
// admission, AnnotationUpstream). The CA the hub checks the operator's
// certificate against is the webhook's caBundle, or the Secret of the
// cert-manager Certificate that injected it (whose cainjector annotation
// is dropped: the hub writes its own CA there). Conversion webhooks keep
// the operator up: said in a note.
func viaHub(objs []obj, dep obj, sub string, o Options, note func(string, string, ...any)) ([]obj, webhookTargets, error) {
	ns := str(dep, "metadata", "namespace")
	services := podServices(objs, dep)
	calls := func(cc obj) (string, bool) {
		s := mapAt(cc, "service")
		if s == nil || str(s, "namespace") != ns || !services[str(s, "name")] {
			return "", false
		}
		port := int64(443)
		if p, ok := s["port"].(int64); ok {
			port = p
		} else if p, ok := s["port"].(float64); ok {
			port = int64(p)
		}
		return fmt.Sprintf("%s:%d", str(s, "name"), port), true
	}
	var out []obj
	var t webhookTargets
	for _, c := range objs {
		kind := c["kind"]
		if kind == "CustomResourceDefinition" {
			conv := mapAt(c, "spec", "conversion")
			if _, ok := calls(mapAt(conv, "webhook", "clientConfig")); str(conv, "strategy") == "Webhook" && ok {
				note("warning", "CRD %s converts through the Deployment's pods: every read of another version calls it, so it must stay up (do not serve it at zero)", str(c, "metadata", "name"))
			}
			continue
		}
		if kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration" {
			continue
		}
		name := str(c, "metadata", "name")
		cfg := runtime.DeepCopyJSON(c)
		upstream, caBundle := "", ""
		var served []string
		for _, w := range list(cfg["webhooks"]) {
			cc := mapAt(w, "clientConfig")
			svc, ok := calls(cc)
			if !ok {
				continue
			}
			if upstream != "" && svc != upstream {
				return nil, t, fmt.Errorf("%s %s: its webhooks call two Services of the operator (%s, %s); the hub forwards one configuration to one: split it in two",
					kind, name, upstream, svc)
			}
			upstream = svc
			if b := str(cc, "caBundle"); b != "" {
				caBundle = b
			}
			path := str(mapAt(cc, "service"), "path")
			if path == "" {
				path = "/"
			}
			w["clientConfig"] = obj{"service": obj{"namespace": o.HubNamespace, "name": o.HubName, "port": int64(443),
				"path": admission.Path(ns, sub, o.WebhookToken, path)}}
			served = append(served, str(w, "name"))
			timeout := int64(10)
			if v, ok := w["timeoutSeconds"].(int64); ok {
				timeout = v
			} else if v, ok := w["timeoutSeconds"].(float64); ok {
				timeout = int64(v)
			}
			if timeout < 10 {
				note("warning", "%s %s webhook %s has timeoutSeconds %d: called at zero, the operator's pod must start and answer within it, else its failurePolicy decides; "+
					"give it 10 or more (at most 30)", kind, name, str(w, "name"), timeout)
			}
		}
		if upstream == "" {
			continue
		}
		meta := mapAt(cfg, "metadata")
		ann := mapAt(meta, "annotations")
		if ann == nil {
			ann = obj{}
			meta["annotations"] = ann
		}
		switch from := str(ann, certManagerInject); {
		case from != "":
			secret, err := certificateSecret(objs, from)
			if err != nil {
				return nil, t, fmt.Errorf("%s %s: %w", kind, name, err)
			}
			delete(ann, certManagerInject)
			ann[admission.AnnotationUpstreamCASecret] = secret
			t.secrets = appendNew(t.secrets, secret)
			note("certain", "%s %s: its webhooks %s call the hub, which wakes the Deployment and calls Service %s's pods, their certificate checked against Secret %s/%s's ca.crt "+
				"(cert-manager's Certificate %s; its cainjector no longer writes this caBundle: the hub writes its own CA there)", kind, name, strings.Join(served, ", "), upstream, ns, secret, from)
		case caBundle != "":
			ann[admission.AnnotationUpstreamCA] = caBundle
			note("certain", "%s %s: its webhooks %s call the hub, which wakes the Deployment and calls Service %s's pods, their certificate checked against the caBundle they had",
				kind, name, strings.Join(served, ", "), upstream)
		default:
			return nil, t, fmt.Errorf("%s %s: its webhooks %s call the operator with no caBundle and no %s annotation: nothing says which CA signed its certificate; "+
				"give the configuration as the cluster has it (--from-cluster) or add the caBundle", kind, name, strings.Join(served, ", "), certManagerInject)
		}
		ann[admission.AnnotationOperator] = ns + "/" + sub
		ann[admission.AnnotationUpstream] = upstream
		labels := mapAt(meta, "labels")
		if labels == nil {
			labels = obj{}
			meta["labels"] = labels
		}
		labels[admission.LabelViaHub] = "true"
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"} {
			delete(meta, k)
		}
		delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
		svcName, _, _ := strings.Cut(upstream, ":")
		t.services = appendNew(t.services, svcName)
		if kind == "MutatingWebhookConfiguration" {
			t.mutating = append(t.mutating, name)
		} else {
			t.validating = append(t.validating, name)
		}
		out = append(out, cfg)
	}
	return out, t, nil
}

// podServices are the Services of the Deployment's namespace that select
// its pods.
func podServices(objs []obj, dep obj) map[string]bool {
	podLabels := mapAt(dep, "spec", "template", "metadata", "labels")
	ns := str(dep, "metadata", "namespace")
	services := map[string]bool{}
	for _, o := range objs {
		if o["kind"] != "Service" || str(o, "metadata", "namespace") != ns {
			continue
		}
		sel := mapAt(o, "spec", "selector")
		if len(sel) == 0 {
			continue
		}
		match := true
		for k, v := range sel {
			if podLabels[k] != v {
				match = false
			}
		}
		if match {
			services[str(o, "metadata", "name")] = true
		}
	}
	return services
}

// certificateSecret is spec.secretName of cert-manager's Certificate
// ns/name in the input.
func certificateSecret(objs []obj, from string) (string, error) {
	ns, name, _ := strings.Cut(from, "/")
	for _, o := range objs {
		if o["kind"] == "Certificate" && strings.HasPrefix(fmt.Sprint(o["apiVersion"]), "cert-manager.io/") &&
			str(o, "metadata", "namespace") == ns && str(o, "metadata", "name") == name {
			if s := str(o, "spec", "secretName"); s != "" {
				return s, nil
			}
			return "", fmt.Errorf("cert-manager Certificate %s has no spec.secretName", from)
		}
	}
	return "", fmt.Errorf("its caBundle comes from cert-manager's Certificate %s (annotation %s), which is not in the input: give it with -f (kubebuilder's config/certmanager)", from, certManagerInject)
}

func appendNew(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	l = append(l, s)
	slices.Sort(l)
	return l
}
