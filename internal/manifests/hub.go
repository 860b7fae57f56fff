package manifests

import (
	"bytes"
	"fmt"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/config/crd"
)

// Event sources of a serverless operator (Options.Source, --source).
const (
	// SourceKnative: one ApiServerSource per kind, PingSources for the
	// sweeps and a wakeup source per operator.
	SourceKnative = "knative"
	// SourceHub: one Subscription to the cluster's opzero hub
	// (cmd/opzero-hub), which is deployed with it (the default).
	SourceHub = "hub"
)

// DefaultHubImage is the image of the hub: cmd/opzero-hub.
const DefaultHubImage = "ko://github.com/opzero/opzero/cmd/opzero-hub"

// The hub is one per cluster: these names are the same in every operator's
// manifests.
const (
	HubNamespace = "opzero-system"
	HubName      = "opzero-hub"
	// HubPeersName is the headless Service whose name resolves to every
	// ready hub replica: a starting operator announces itself to each
	// (opzero-hub's /v1/starting, package starting).
	HubPeersName = "opzero-hub-peers"
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
	// its bucket Leases, in its namespace
	hubLeaseVerbs = []string{"get", "create", "update"}
)

// hubReplicas: one may die (its buckets move to the other within the
// Leases' expiry) or be replaced (it hands them over).
const hubReplicas = 2

// hubWiring is what --source=hub writes instead of the Knative sources: the
// operator's Subscription and the ClusterRole that lets the hub read its
// kinds (both per operator), and the hub itself (the same in every
// operator's manifests).
func (g *gen) hubWiring() []Object {
	objs := []Object{g.subscription()}
	objs = append(objs, g.hubReadRole())
	if g.o.NoHub {
		return objs
	}
	return append(objs, HubObjects(g.o.HubImage)...)
}

// subscription asks the hub for what the Knative wiring gets from its
// sources: the same kinds in the same modes (owner filter on owned kinds,
// all namespaces, the kinds' selectors), referencedBy where the operator
// declared it, updatedWhen where every use of the kind lets only some
// updates through (builder.UpdatedWhen, an adopted controller's
// predicates), events where --hub-events names the kind, skipObserved on the primary as the operator skips (the hub
// then does not send what the operator would only acknowledge), the same sweeps under the PingSources' names, and the
// operator's Wakeups when durable time is on.
func (g *gen) subscription() Object {
	var resources []any
	for _, k := range g.sourceKinds() {
		r := map[string]any{"apiVersion": k.APIVersion(), "kind": k.Kind.Kind, "mode": k.mode}
		// The project's cache holds no more than its options say: the
		// hub sends no more (the kind's own selector and the cache's both
		// hold).
		nss, cached := g.in.Cache.For(k.Group, k.Kind.Kind)
		if k.Everywhere { // watched through a cache of the operator's own
			nss, cached = nil, ""
		}
		if sel := joinSelectors(k.Selector, cached); sel != "" {
			r["labelSelector"] = sel
		}
		if len(nss) > 0 {
			var ns []any
			for _, n := range nss {
				ns = append(ns, n)
			}
			r["namespaces"] = ns
		}
		if k.owned {
			r["owner"] = map[string]any{"apiVersion": k.owner.APIVersion(), "kind": k.owner.Kind}
		}
		if k.mode == "Reference" && k.referrer != nil {
			r["referencedBy"] = map[string]any{"apiVersion": k.referrer.APIVersion(), "kind": k.referrer.Kind, "fieldPath": k.ReferencedBy}
		}
		if len(k.UpdatedWhen) > 0 {
			var parts []any
			for _, p := range k.UpdatedWhen {
				parts = append(parts, p)
			}
			r["updatedWhen"] = parts
		}
		if len(k.events) > 0 {
			var types []any
			for _, t := range k.events {
				types = append(types, t)
			}
			r["events"] = types
		}
		if k.mode == "Resource" && k.skip != nil {
			so := map[string]any{}
			if k.skip.OnLabelChange {
				so["labels"] = true
			}
			if k.skip.OnAnnotationChange {
				so["annotations"] = true
			}
			r["skipObserved"] = so
		}
		resources = append(resources, r)
	}
	spec := map[string]any{
		"operator":           g.op.Name,
		"serviceAccountName": g.name(),
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
		if len(g.ops) > 1 { // their Wakeups carry each controller's name
			var others []any
			for _, op := range g.ops {
				if op.Name != g.op.Name {
					others = append(others, op.Name)
				}
			}
			spec["operators"] = others
		}
	}
	sub := object("opzero.dev/v1alpha1", "Subscription", g.o.Namespace, g.name(), g.labels("source"))
	sub["spec"] = spec
	return Object{File: FileSources, Obj: sub}
}

// joinSelectors is the label selector both a and b hold for ("" is
// everything).
func joinSelectors(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return a + "," + b
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
	for _, op := range g.ops {
		r.addRules(describedRules(op.SourceRules))
	}
	l := g.labels("hub")
	l[HubAggregateLabel] = "true"
	role := object("rbac.authorization.k8s.io/v1", "ClusterRole", "", g.hubRoleName(), l)
	role["rules"] = rulesValue(r.list())
	return Object{File: FileRBAC, Obj: role}
}

// hubRoleName names the operator's aggregated ClusterRole:
// opzero-hub:<namespace>:<operator>, unambiguous since neither name may
// hold a colon.
func (g *gen) hubRoleName() string { return HubName + ":" + g.o.Namespace + ":" + g.name() }

// HubObjects are the hub, cluster-shared: its namespace, service account,
// RBAC and Deployment. They carry no operator's name, so that applying the
// manifests of every operator (server-side) leaves them as they are, and
// `opzero hub manifests` writes them alone (with the Subscription CRD).
func HubObjects(image string) []Object {
	if image == "" {
		image = DefaultHubImage
	}
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
	base.add("discovery.k8s.io", "endpointslices", readVerbs...) // early delivery to a starting pod (opzero-hub --early-delivery)
	base.add("authentication.k8s.io", "tokenreviews", "create")  // who announces a starting pod
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

	// tokens of its own service account only (deliveries' OIDC tokens), and
	// the bucket Leases its replicas share the Subscriptions by
	var own rules
	own.addNamed("", "serviceaccounts/token", HubName, "create")
	own.add("coordination.k8s.io", "leases", hubLeaseVerbs...)
	for _, o := range role(HubName, HubNamespace, HubName, own.list(), l) {
		objs = append(objs, inFile(FileHub, o))
	}
	objs = append(objs, hubAdmissionObjects(l)...) // its admission endpoint (hubwebhooks.go)
	return append(objs, hub(withAdmission(hubDeployment(image, l))), hub(hubDisruptionBudget(l)), hub(hubPeers(l)))
}

// hubPeers is the headless Service whose DNS name resolves to every ready
// hub replica's address (HubPeersName).
func hubPeers(l map[string]any) map[string]any {
	svc := object("v1", "Service", HubNamespace, HubPeersName, l)
	svc["spec"] = map[string]any{
		"clusterIP": "None",
		"selector":  hubSelector(),
		"ports":     []any{map[string]any{"name": "health", "port": int64(hubHealthPort), "targetPort": "health"}},
	}
	return svc
}

// hubPeersAddress is where an operator announces itself to the hub's
// replicas (the operator's OPZERO_HUB_PEERS).
func hubPeersAddress() string {
	return fmt.Sprintf("%s.%s.svc:%d", HubPeersName, HubNamespace, hubHealthPort)
}

// hubSelector selects the hub's pods.
func hubSelector() map[string]any {
	return map[string]any{"app.kubernetes.io/name": HubName, "app.kubernetes.io/component": "hub"}
}

// hubDisruptionBudget keeps one replica of the hub up through voluntary
// disruptions (a node drained): the other holds or takes every bucket.
func hubDisruptionBudget(l map[string]any) map[string]any {
	pdb := object("policy/v1", "PodDisruptionBudget", HubNamespace, HubName, l)
	pdb["spec"] = map[string]any{"minAvailable": int64(1), "selector": map[string]any{"matchLabels": hubSelector()}}
	return pdb
}

// What a hub replica asks of its node.
const (
	hubCPURequest    = "50m"
	hubMemoryRequest = "64Mi"
)

// hubDeployment runs cmd/opzero-hub: two replicas, which share the
// Subscriptions by bucket Leases in its namespace (a Subscription is
// served by one replica at a time: its deliveries of one object stay
// ordered), preferably on two nodes; a rolling update starts the new
// replica before it stops an old one, which hands its buckets over. Its
// health and readiness on --health-addr, its identity from POD_NAMESPACE
// (--service-account defaults to $POD_NAMESPACE/opzero-hub, the Leases'
// namespace to $POD_NAMESPACE) and POD_NAME (its name in the Leases).
func hubDeployment(image string, l map[string]any) map[string]any {
	sel := hubSelector()
	dep := object("apps/v1", "Deployment", HubNamespace, HubName, l)
	dep["spec"] = map[string]any{
		"replicas": int64(hubReplicas),
		"selector": map[string]any{"matchLabels": sel},
		"strategy": map[string]any{"type": "RollingUpdate",
			"rollingUpdate": map[string]any{"maxUnavailable": int64(0), "maxSurge": int64(1)}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": l},
			"spec": map[string]any{
				"serviceAccountName": HubName,
				"affinity": map[string]any{"podAntiAffinity": map[string]any{
					"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
						"weight": int64(100),
						"podAffinityTerm": map[string]any{"topologyKey": "kubernetes.io/hostname",
							"labelSelector": map[string]any{"matchLabels": sel}},
					}}}},
				"securityContext": map[string]any{"runAsNonRoot": true,
					"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
				"containers": []any{map[string]any{
					"name":  "hub",
					"image": image,
					"args":  []any{fmt.Sprintf("--health-addr=:%d", hubHealthPort)},
					"env": []any{
						map[string]any{"name": "POD_NAMESPACE",
							"valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}},
						map[string]any{"name": "POD_NAME",
							"valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
					},
					"ports": []any{map[string]any{"name": "health", "containerPort": int64(hubHealthPort)}},
					// /healthz fails once its watch of Subscriptions has been
					// down for 2 minutes: kubelet restarts it.
					"livenessProbe": httpProbe("/healthz", "health", 3),
					// /readyz: its watch of Subscriptions synced and every
					// bucket tried (held, or held by the other replica).
					"readinessProbe": httpProbe("/readyz", "health", 3),
					"securityContext": map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
						"capabilities": map[string]any{"drop": []any{"ALL"}}},
					// Requests, so that the path of every serverless
					// operator's events is not a BestEffort pod (the first
					// a node under pressure evicts): about a replica's
					// memory with a hundred operators (docs/hub.md). No
					// limits: its memory grows with what the cluster's
					// operators watch, and an OOM kill or CPU throttling
					// would stall every one of them.
					"resources": map[string]any{"requests": map[string]any{"cpu": hubCPURequest, "memory": hubMemoryRequest}},
				}},
			},
		},
	}
	return dep
}

// HubInstall is what `opzero hub manifests` writes: the CRDs of
// Subscriptions and Wakeups (as this opzero carries them) and the hub
// (HubObjects), for a platform team that installs the hub once per cluster
// and the operators with --install-hub=false.
func HubInstall(image string) ([]Object, error) {
	var objs []Object
	for _, f := range []string{"opzero.dev_subscriptions.yaml", "opzero.dev_wakeups.yaml"} {
		b, err := crd.Files.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var c apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if !bytes.HasPrefix(b, []byte("---\n")) {
			b = append([]byte("---\n"), b...)
		}
		objs = append(objs, Object{File: FileCRDs, Raw: b, Obj: object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", c.Name, nil)})
	}
	objs = append(objs, HubObjects(image)...)
	sortObjects(objs)
	return objs, nil
}
