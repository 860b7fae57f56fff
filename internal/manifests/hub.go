package manifests

import "fmt"

// Event sources of a serverless operator (Options.Source, --source).
const (
	// SourceKnative: one ApiServerSource per kind, PingSources for the
	// sweeps and a wakeup source per operator (the default).
	SourceKnative = "knative"
	// SourceHub: one Subscription to the cluster's opzero hub
	// (cmd/opzero-hub), which is deployed with it.
	SourceHub = "hub"
)

// DefaultHubImage is the image of the hub: cmd/opzero-hub.
const DefaultHubImage = "ko://github.com/opzero/opzero/cmd/opzero-hub"

// The hub is one per cluster: these names are the same in every operator's
// manifests.
const (
	HubNamespace = "opzero-system"
	HubName      = "opzero-hub"
	// HubAggregateLabel marks the ClusterRoles aggregated into the hub's
	// (its base rules, and each operator's subscribed kinds).
	HubAggregateLabel = "opzero.dev/aggregate-to-hub"
	hubHealthPort     = 8081
)

// hubSender is the identity the hub's deliveries carry.
func hubSender() string { return "system:serviceaccount:" + HubNamespace + ":" + HubName }

// hubVerbs: what the hub does besides reading the subscribed kinds.
var (
	hubSubscriptionVerbs = []string{"get", "list", "watch"}
	hubStatusVerbs       = []string{"get", "update", "patch"}
	hubWakeupVerbs       = []string{"get", "list", "watch", "delete"}
	hubEventVerbs        = []string{"create", "patch"}
	// it checks Subscriptions again when RBAC changes (metadata-only watches)
	hubRBACVerbs = []string{"list", "watch"}
)

// hubWiring is what --source=hub writes instead of the Knative sources: the
// operator's Subscription and the ClusterRole that lets the hub read its
// kinds (both per operator), and the hub itself (the same in every
// operator's manifests).
func (g *gen) hubWiring() []Object {
	objs := []Object{g.subscription()}
	objs = append(objs, g.hubReadRole())
	return append(objs, hubObjects(g.o.HubImage)...)
}

// subscription asks the hub for what the Knative wiring gets from its
// sources: the same kinds in the same modes (owner filter on owned kinds,
// all namespaces, the kinds' selectors), referencedBy where the operator
// declared it, skipObserved on the primary as the operator skips (the hub
// then does not send what the operator would only acknowledge), the same sweeps under the PingSources' names, and the
// operator's Wakeups when durable time is on.
func (g *gen) subscription() Object {
	p := g.op.Primary
	var resources []any
	for i, k := range g.sourceKinds() {
		r := map[string]any{"apiVersion": k.APIVersion(), "kind": k.Kind.Kind, "mode": k.mode}
		if k.Selector != "" {
			r["labelSelector"] = k.Selector
		}
		if k.owned {
			r["owner"] = map[string]any{"apiVersion": p.APIVersion(), "kind": p.Kind}
		}
		if k.mode == "Reference" && k.ReferencedBy != "" {
			r["referencedBy"] = map[string]any{"apiVersion": p.APIVersion(), "kind": p.Kind, "fieldPath": k.ReferencedBy}
		}
		if i == 0 && g.op.Skip != nil { // the primary, in Resource mode
			so := map[string]any{}
			if g.op.Skip.OnLabelChange {
				so["labels"] = true
			}
			if g.op.Skip.OnAnnotationChange {
				so["annotations"] = true
			}
			r["skipObserved"] = so
		}
		resources = append(resources, r)
	}
	spec := map[string]any{
		"operator":           g.op.Name,
		"serviceAccountName": g.op.Name,
		"sink":               g.sink(),
		"resources":          resources,
	}
	var sweeps []any
	for _, s := range g.sweeps() {
		m := map[string]any{"name": s.name, "schedule": s.schedule} // CRON_TZ= stays in the schedule
		if s.data != "" {
			m["data"] = s.data
		}
		sweeps = append(sweeps, m)
	}
	if len(sweeps) > 0 {
		spec["sweeps"] = sweeps
	}
	if g.o.durable() {
		spec["wakeups"] = true
	}
	sub := object("opzero.dev/v1alpha1", "Subscription", g.o.Namespace, g.op.Name, g.labels("source"))
	sub["spec"] = spec
	return Object{File: FileSources, Obj: sub}
}

// hubReadRole lets the hub get, list and watch the kinds the operator
// subscribes to (the referrer kind, the primary, among them): aggregated
// into the hub's ClusterRole by its label, so the hub holds no more than
// the operators it serves subscribe to.
func (g *gen) hubReadRole() Object {
	var r rules
	for _, k := range g.sourceKinds() {
		r.add(k.Group, g.resource(k.Kind), readVerbs...)
	}
	r.addRules(describedRules(g.op.SourceRules))
	l := g.labels("hub")
	l[HubAggregateLabel] = "true"
	role := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", g.hubRoleName(), l)
	role["rules"] = rulesValue(r.list())
	return Object{File: FileRBAC, Obj: role}
}

// hubRoleName names the operator's aggregated ClusterRole:
// opzero-hub:<namespace>:<operator>, unambiguous since neither name may
// hold a colon.
func (g *gen) hubRoleName() string { return HubName + ":" + g.o.Namespace + ":" + g.op.Name }

// hubObjects are the hub, cluster-shared: its namespace, service account,
// RBAC and Deployment. They carry no operator's name, so that applying the
// manifests of every operator (server-side) leaves them as they are.
func hubObjects(image string) []Object {
	l := map[string]any{"app.kubernetes.io/name": HubName, "app.kubernetes.io/component": "hub",
		"app.kubernetes.io/managed-by": "opzero"}
	hub := func(o map[string]any) Object { return Object{File: FileHub, Obj: o} }
	objs := []Object{
		hub(object("v1", "Namespace", "", HubNamespace, l)),
		hub(object("v1", "ServiceAccount", HubNamespace, HubName, l)),
	}

	// opzero-hub aggregates opzero-hub-base and each operator's read role.
	agg := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", HubName, l)
	agg["aggregationRule"] = map[string]any{"clusterRoleSelectors": []any{
		map[string]any{"matchLabels": map[string]any{HubAggregateLabel: "true"}}}}
	objs = append(objs, hub(agg))
	var base rules
	base.add("opzero.dev", "subscriptions", hubSubscriptionVerbs...)
	base.add("opzero.dev", "subscriptions/status", hubStatusVerbs...)
	base.add("opzero.dev", "wakeups", hubWakeupVerbs...)
	base.add("", "events", hubEventVerbs...)
	base.add("events.k8s.io", "events", hubEventVerbs...)
	base.add("authorization.k8s.io", "subjectaccessreviews", "create")
	base.add("serving.knative.dev", "services", readVerbs...)
	for _, res := range []string{"roles", "rolebindings", "clusterroles", "clusterrolebindings"} {
		base.add("rbac.authorization.k8s.io", res, hubRBACVerbs...)
	}
	bl := map[string]any{HubAggregateLabel: "true"}
	for k, v := range l {
		bl[k] = v
	}
	baseRole := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", HubName+"-base", bl)
	baseRole["rules"] = rulesValue(base.list())
	objs = append(objs, hub(baseRole))
	binding := object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", HubName, l)
	binding["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HubName}
	binding["subjects"] = []any{map[string]any{"kind": "ServiceAccount", "name": HubName, "namespace": HubNamespace}}
	objs = append(objs, hub(binding))

	// tokens of its own service account only (deliveries' OIDC tokens)
	var own rules
	own.addNamed("", "serviceaccounts/token", HubName, "create")
	for _, o := range role(HubName, HubNamespace, HubName, own.list(), l) {
		objs = append(objs, inFile(FileHub, o))
	}
	objs = append(objs, hubAdmissionObjects(l)...) // its admission endpoint (hubwebhooks.go)
	return append(objs, hub(withAdmission(hubDeployment(image, l))))
}

// hubDeployment runs cmd/opzero-hub: one replica (its deliveries of one
// object are ordered), its health on --health-addr, its identity from
// POD_NAMESPACE (--service-account defaults to $POD_NAMESPACE/opzero-hub).
func hubDeployment(image string, l map[string]any) map[string]any {
	sel := map[string]any{"app.kubernetes.io/name": HubName, "app.kubernetes.io/component": "hub"}
	dep := object("apps/v1", "Deployment", HubNamespace, HubName, l)
	dep["spec"] = map[string]any{
		"replicas": int64(1),
		"selector": map[string]any{"matchLabels": sel},
		"template": map[string]any{
			"metadata": map[string]any{"labels": l},
			"spec": map[string]any{
				"serviceAccountName": HubName,
				"securityContext": map[string]any{"runAsNonRoot": true,
					"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
				"containers": []any{map[string]any{
					"name":  "hub",
					"image": image,
					"args":  []any{fmt.Sprintf("--health-addr=:%d", hubHealthPort)},
					"env": []any{map[string]any{"name": "POD_NAMESPACE",
						"valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}}},
					"ports": []any{map[string]any{"name": "health", "containerPort": int64(hubHealthPort)}},
					// /healthz fails once its watch of Subscriptions has been
					// down for 2 minutes: kubelet restarts it.
					"livenessProbe": httpProbe("/healthz", "health", 3),
					"securityContext": map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
						"capabilities": map[string]any{"drop": []any{"ALL"}}},
				}},
			},
		},
	}
	return dep
}
