package manifests

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/hub/admission"
)

// Webhooks at zero (docs/webhooks.md). By default (--webhooks=hub) a
// serverless operator's admission webhooks are called at the cluster's
// opzero hub, the one always-on TLS endpoint, which forwards each
// AdmissionReview to the operator's Knative Service with its OIDC token
// (package internal/hub/admission): no process of the operator's runs
// while nothing is admitted. The webhook configurations are the
// project's markers unchanged in meaning, pointed at the hub's Service at
// a path that names the operator and a random token of the install. The
// serverless binary registers its webhooks (no ENABLE_WEBHOOKS=false)
// and serves them on its HTTP port. A project that converts kinds keeps
// its --mode=webhooks Deployment for /convert only: conversion is not
// served at zero (docs/webhooks.md has the figure).
// --webhooks=always-on keeps today's Deployment for every webhook.

// How an adopted project's admission webhooks are served (Options.Webhooks).
const (
	// WebhooksHub: called at the hub, which wakes the operator (serverless default).
	WebhooksHub = "hub"
	// WebhooksAlwaysOn: the same binary with --mode=webhooks, always on.
	WebhooksAlwaysOn = "always-on"
)

// The hub's admission endpoint: its container port and Service.
const (
	hubWebhookPort     = 8443
	hubWebhookCertName = HubName + "-webhook-certs"
	// coldStartBudget: a webhook whose timeoutSeconds is shorter gets a
	// warning (a cold start on a real node is 1.5-1.8 s p50: docs/webhooks.md).
	coldStartBudget = 5
	// defaultWebhookTimeout is the API server's default timeoutSeconds,
	// written out when a marker leaves it empty.
	defaultWebhookTimeout = 10
)

// viaHub says whether the operator's admission webhooks are served
// through the hub.
func (g *gen) viaHub() bool {
	return g.in.Webhooks != nil && g.o.Mode != Classic && g.o.Webhooks != WebhooksAlwaysOn
}

// alwaysOnWebhooks says whether a Deployment serves webhooks: classic (the
// operator's), --webhooks=always-on, or a project that converts kinds
// (its /convert).
func (g *gen) alwaysOnWebhooks() bool {
	return g.in.Webhooks != nil && (!g.viaHub() || len(g.in.Webhooks.Conversion) > 0)
}

// NewWebhookToken is a random path segment of the hub's admission paths: 128 bits, base32, lower case.
func NewWebhookToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)), nil
}

// hubClientConfig points a webhook at the hub's Service. No caBundle:
// the hub writes its own CA there.
func (g *gen) hubClientConfig(path string) admissionregv1.WebhookClientConfig {
	p := admission.Path(g.o.Namespace, g.name(), g.o.WebhookToken, path)
	return admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{
		Namespace: HubNamespace, Name: HubName, Path: &p, Port: ptr.To[int32](443)}}
}

// hubWebhookMeta labels and annotates a configuration the hub serves.
func (g *gen) hubWebhookMeta(o map[string]any) {
	m := o["metadata"].(map[string]any)
	m["labels"].(map[string]any)[admission.LabelViaHub] = "true"
	m["annotations"] = map[string]any{admission.AnnotationOperator: g.o.Namespace + "/" + g.name(), admission.AnnotationAudience: g.o.Audience}
}

// withTimeout writes the API server's default timeoutSeconds where the
// marker left it empty (the meaning is the same; the budget of a cold
// start is then in the file), and warns of a budget a cold start may not fit.
func (g *gen) withTimeout(name string, t *int32) *int32 {
	if t == nil {
		t = ptr.To[int32](defaultWebhookTimeout)
	}
	if *t < coldStartBudget && g.o.Warnings != nil {
		fmt.Fprintf(g.o.Warnings, "warning: %s: webhook %s has timeoutSeconds=%d: called at zero, the operator must start and answer within it (a cold start is 1.5-1.8 s on a real node), "+
			"else the call fails and its failurePolicy decides; give it timeoutSeconds=%d or more, or keep it warm with --webhooks=%s (docs/webhooks.md)\n",
			g.name(), name, *t, coldStartBudget, WebhooksAlwaysOn)
	}
	return t
}

// hubAdmissionObjects are what the hub's admission endpoint needs, the same
// in every operator's manifests: its Service (443 to the endpoint), read
// and patch of webhook configurations (it writes its CA into their
// caBundles; aggregated into the hub's ClusterRole), and the Secret it
// keeps its certificate in.
func hubAdmissionObjects(l map[string]any) []Object {
	hub := func(o map[string]any) Object { return Object{File: FileHub, Obj: o} }
	svc := object("v1", "Service", HubNamespace, HubName, l)
	svc["spec"] = map[string]any{
		"selector": map[string]any{"app.kubernetes.io/name": HubName, "app.kubernetes.io/component": "hub"},
		"ports":    []any{map[string]any{"name": "webhooks", "port": int64(443), "targetPort": "webhooks"}},
	}
	var r rules // patch: only each operator's own (hubPatchRole)
	for _, res := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		r.add("admissionregistration.k8s.io", res, "get", "list", "watch")
	}
	al := map[string]any{HubAggregateLabel: "true"}
	for k, v := range l {
		al[k] = v
	}
	cr := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", HubName+"-admission", al)
	cr["rules"] = rulesValue(r.list())
	objs := []Object{hub(svc), hub(cr)}
	var sec rules
	sec.add("", "secrets", "create") // create cannot be limited to a name
	sec.addNamed("", "secrets", hubWebhookCertName, "get", "update")
	for _, o := range role(HubName+"-webhook-certs", HubNamespace, HubName, sec.list(), l) {
		objs = append(objs, inFile(FileHub, o))
	}
	return objs
}

// hubPatchRole lets the hub write its CA into the caBundles of this
// operator's webhook configurations, and no others: aggregated into the
// hub's ClusterRole by its label, as the hub's read role of its kinds.
func (g *gen) hubPatchRole(name string) Object {
	var r rules
	for _, res := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		r.addNamed("admissionregistration.k8s.io", res, name, "patch")
	}
	l := g.labels("hub")
	l[HubAggregateLabel] = "true"
	role := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", g.hubRoleName()+"-webhooks", l)
	role["rules"] = rulesValue(r.list())
	return Object{File: FileRBAC, Obj: role}
}

// withAdmission gives the hub's Deployment its admission endpoint: the
// flag and the port its Service targets.
func withAdmission(dep map[string]any) map[string]any {
	spec := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	c["args"] = append(c["args"].([]any), fmt.Sprintf("--webhook-addr=:%d", hubWebhookPort))
	c["ports"] = append(c["ports"].([]any), map[string]any{"name": "webhooks", "containerPort": int64(hubWebhookPort)})
	return dep
}

// ReadWebhookToken reads the install's webhook path token from the
// webhook configurations in dir's webhooks.yaml ("" if there are none), for
// Options.WebhookToken: regenerating into a folder keeps it.
func ReadWebhookToken(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileWebhooks))
	if os.IsNotExist(err) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	var token string
	err = eachObject(map[string][]byte{FileWebhooks: b}, func(_, kind string, raw []byte) error {
		if kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration" || token != "" {
			return nil
		}
		var c struct {
			Webhooks []struct {
				ClientConfig admissionregv1.WebhookClientConfig `json:"clientConfig"`
			} `json:"webhooks"`
		}
		if err := yaml.Unmarshal(raw, &c); err != nil {
			return err
		}
		for _, w := range c.Webhooks {
			if p := webhookPath(w.ClientConfig); strings.HasPrefix(p, admission.PathPrefix) {
				if parts := strings.SplitN(strings.TrimPrefix(p, admission.PathPrefix), "/", 4); len(parts) == 4 {
					token = parts[2]
				}
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", filepath.Join(dir, FileWebhooks), err)
	}
	return token, nil
}
