// Package unchanged derives, from what an operator ships (its release
// YAML, a rendered Helm chart, a kustomize folder's output), the hub
// Subscription that serves its Deployment at zero without rebuilding it:
// `opzero hub adopt`.
//
// # What is derived, and how sure it is
//
//   - The Deployment: the one in the input (or the one named). Certain.
//   - What it watches: every resource its service account may list and
//     watch, through the RoleBindings and ClusterRoleBindings of the input
//     (a RoleBinding's rules hold in its namespace, a ClusterRoleBinding's
//     in every namespace). An operator may be granted more than it
//     watches (then it is woken for a change it ignores: one start for
//     nothing, never a loss); it cannot watch more than it is granted. Left
//     out, and said so: Leases and Events (leader election and recording,
//     not inputs), a role whose name says leader election (kubebuilder's
//     leader-election-role grants ConfigMaps in its namespace for the old
//     ConfigMap lock), subresources, wildcards (they name no kind).
//   - Kinds: a resource's kind from the input's CRDs, else from the
//     built-in APIs of Kubernetes (client-go's scheme); a resource neither
//     knows is an error naming it (give its CRD with -f).
//   - The generation rule (skipObserved): on the input's CRDs whose schema
//     declares status.observedGeneration (the operator's own status writes
//     then do not keep it up). Likely, not certain: stated.
//   - Work in flight: controller-runtime's metrics endpoint, from the
//     container's --metrics-bind-address (https unless --metrics-secure=false,
//     as kubebuilder's manager does). Without one, the idle period alone
//     decides, stated.
//   - Admission webhooks the Deployment serves (configurations calling a
//     Service of its namespace that selects its pods): rewritten to call
//     the hub, which wakes the Deployment and forwards each call to that
//     Service's ready pods, checked against the webhook's caBundle or the
//     Secret of the cert-manager Certificate that injected it. Certain.
//     Conversion webhooks of its CRDs keep it up: a warning.
package unchanged

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Options narrow what is derived.
type Options struct {
	// Deployment is the operator's Deployment, name or namespace/name,
	// when the input has more than one.
	Deployment string
	// Namespaces limits every namespaced resource to these.
	Namespaces []string
	// Selectors are label selectors by kind (Kind or group/Kind).
	Selectors map[string]string
	// Owners keep only objects of a kind (the key) whose controller owner
	// is of another kind (the value): Deployment=Memcached.
	Owners map[string]string
	// Ignore are kinds (Kind or group/Kind) it may watch but whose changes
	// never need a reconcile (pods it only lists): left out.
	Ignore []string
	// Events are the types of change (created, updated, deleted) that
	// wake it, by kind (Kind or group/Kind; a kind not named: every
	// type): the resource's events. A kind it does not watch, or another
	// type, is an error.
	Events map[string][]string
	// IdleAfter and MaxSleep are spec.scaleToZero's (0: the hub's default).
	IdleAfter, MaxSleep time.Duration
	// HubNamespace and HubName name the hub's service account.
	HubNamespace, HubName string
	// AggregateLabel marks the hub's aggregated ClusterRoles.
	AggregateLabel string
	// WebhookToken is the random path segment of the hub's admission paths
	// (package admission) in the rewritten webhook configurations.
	WebhookToken string
}

// Note is something derived, or left out, and how sure it is.
type Note struct {
	Sure string // "certain", "likely", "left out", "warning"
	Text string
}

// Result is what Derive writes.
type Result struct {
	Namespace, Deployment string
	Objects               []map[string]any
	Notes                 []Note
}

type obj = map[string]any

// Derive finds the operator's Deployment in objs and writes its
// Subscription and the rights the hub needs to serve it.
func Derive(objs []obj, o Options) (*Result, error) {
	if err := checkEvents(o.Events); err != nil {
		return nil, err
	}
	dep, err := findDeployment(objs, o.Deployment)
	if err != nil {
		return nil, err
	}
	ns, name := str(dep, "metadata", "namespace"), str(dep, "metadata", "name")
	if ns == "" {
		return nil, fmt.Errorf("Deployment %s has no metadata.namespace: render the release with its namespace (helm template -n, kustomize's namespace:)", name)
	}
	r := &Result{Namespace: ns, Deployment: name}
	note := func(sure, format string, a ...any) { r.Notes = append(r.Notes, Note{sure, fmt.Sprintf(format, a...)}) }
	note("certain", "Deployment %s/%s: the hub scales its own spec.replicas between 0 and 1", ns, name)

	pod := mapAt(dep, "spec", "template", "spec")
	sa := str(pod, "serviceAccountName")
	if sa == "" {
		sa = str(pod, "serviceAccount")
	}
	if sa == "" {
		sa = "default"
	}
	kinds := newKinds(objs)
	grants, err := grantsOf(objs, ns, sa, note)
	if err != nil {
		return nil, err
	}
	if len(grants) == 0 {
		return nil, fmt.Errorf("service account %s/%s may list and watch nothing in the input (no RoleBinding or ClusterRoleBinding of it whose role is in the input): "+
			"give its RBAC with the Deployment (the release YAML, helm template's output, kustomize build config/default)", ns, sa)
	}
	resources, plurals, err := subscribed(grants, kinds, o, note)
	if err != nil {
		return nil, err
	}
	scale := obj{}
	if o.IdleAfter > 0 {
		scale["idleAfter"] = o.IdleAfter.String()
	}
	if o.MaxSleep > 0 {
		scale["maxSleep"] = o.MaxSleep.String()
	}
	if m := metricsOf(pod); m != nil {
		scale["metrics"] = m
		note("likely", "work in flight: controller-runtime's metrics at %s://<pod>:%v/metrics (from --metrics-bind-address): not stopped while workqueue_depth, "+
			"workqueue_unfinished_work_seconds or controller_runtime_active_workers is above 0", m["scheme"], m["port"])
	} else {
		note("certain", "no metrics endpoint in the container's arguments (--metrics-bind-address): the idle period alone decides when it stops")
	}
	if hasArg(pod, "--leader-elect", "--leader-election", "--enable-leader-election") {
		note("likely", "it elects a leader: a Lease held by one of its pods that is gone is released before the next pod waits on it")
	}
	webhooks, wt, err := viaHub(objs, dep, name, o, note)
	if err != nil {
		return nil, err
	}

	spec := obj{
		"operator":           name,
		"serviceAccountName": sa,
		"sink":               obj{"ref": obj{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}},
		"resources":          resources,
	}
	if len(scale) > 0 {
		spec["scaleToZero"] = scale
	}
	labels := obj{"app.kubernetes.io/managed-by": "opzero", "app.kubernetes.io/component": "hub-target"}
	sub := obj{"apiVersion": "opzero.dev/v1alpha1", "kind": "Subscription",
		"metadata": obj{"namespace": ns, "name": name, "labels": labels}, "spec": spec}
	r.Objects = append(r.Objects, sub)
	r.Objects = append(r.Objects, hubRights(o, ns, name, plurals, scale["metrics"] != nil && scale["metrics"].(obj)["scheme"] == "https", wt, labels)...)
	r.Objects = append(r.Objects, webhooks...)
	return r, nil
}

func findDeployment(objs []obj, want string) (obj, error) {
	var deps []obj
	var names []string
	for _, o := range objs {
		if o["kind"] != "Deployment" || !strings.HasPrefix(fmt.Sprint(o["apiVersion"]), "apps/") {
			continue
		}
		ns, name := str(o, "metadata", "namespace"), str(o, "metadata", "name")
		if want != "" && want != name && want != ns+"/"+name {
			continue
		}
		deps = append(deps, o)
		names = append(names, ns+"/"+name)
	}
	switch {
	case len(deps) == 1:
		return deps[0], nil
	case len(deps) == 0 && want != "":
		return nil, fmt.Errorf("no Deployment %s in the input", want)
	case len(deps) == 0:
		return nil, fmt.Errorf("no Deployment in the input: give the operator's release YAML (with its Deployment and RBAC)")
	}
	sort.Strings(names)
	return nil, fmt.Errorf("the input has %d Deployments (%s): name the operator's with --deployment", len(deps), strings.Join(names, ", "))
}

// grant is one rule of a role bound to the operator's service account,
// where it holds ("" every namespace).
type grant struct {
	rule map[string]any
	ns   string
	role string
}

func grantsOf(objs []obj, ns, sa string, note func(string, string, ...any)) ([]grant, error) {
	roles := map[string]obj{} // "Role ns/name" or "ClusterRole name"
	for _, o := range objs {
		switch o["kind"] {
		case "Role":
			roles["Role "+str(o, "metadata", "namespace")+"/"+str(o, "metadata", "name")] = o
		case "ClusterRole":
			roles["ClusterRole "+str(o, "metadata", "name")] = o
		}
	}
	var out []grant
	for _, b := range objs {
		kind := b["kind"]
		if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
			continue
		}
		bns := str(b, "metadata", "namespace")
		bound := false
		for _, s := range list(b["subjects"]) {
			sns := str(s, "namespace")
			if sns == "" {
				sns = bns
			}
			if str(s, "kind") == "ServiceAccount" && str(s, "name") == sa && sns == ns {
				bound = true
			}
		}
		if !bound {
			continue
		}
		ref := mapAt(b, "roleRef")
		key := str(ref, "kind") + " " + str(ref, "name")
		if str(ref, "kind") == "Role" {
			key = "Role " + bns + "/" + str(ref, "name")
		}
		role := roles[key]
		if role == nil {
			note("left out", "%s %s binds %s, which is not in the input: its rules are not read", kind, str(b, "metadata", "name"), key)
			continue
		}
		where := ""
		if kind == "RoleBinding" {
			where = bns
		}
		rname := str(role, "metadata", "name")
		for _, rule := range list(role["rules"]) {
			out = append(out, grant{rule: rule, ns: where, role: key})
		}
		if rname != "" && len(list(role["rules"])) == 0 && role["aggregationRule"] != nil {
			note("left out", "%s aggregates other roles: only the rules written in it are read", key)
		}
	}
	return out, nil
}

// subscribed turns the grants into the Subscription's resources.
func subscribed(grants []grant, k *kinds, o Options, note func(string, string, ...any)) ([]any, []schema.GroupResource, error) {
	type res struct {
		gr  schema.GroupResource
		nss map[string]bool // "" = every namespace
	}
	found := map[schema.GroupResource]*res{}
	var order []schema.GroupResource
	for _, g := range grants {
		verbs := strs(g.rule["verbs"])
		if !(slices.Contains(verbs, "*") || (slices.Contains(verbs, "list") && slices.Contains(verbs, "watch"))) {
			continue
		}
		leader := strings.Contains(strings.ToLower(g.role), "leader-election") || strings.Contains(strings.ToLower(g.role), "leader_election")
		if len(strs(g.rule["resourceNames"])) > 0 {
			continue // named objects: get, not a watch of a kind
		}
		for _, group := range strs(g.rule["apiGroups"]) {
			for _, r := range strs(g.rule["resources"]) {
				gr := schema.GroupResource{Group: group, Resource: r}
				switch {
				case strings.Contains(r, "/"):
					continue
				case r == "*" || group == "*":
					note("left out", "%s grants list/watch of %s: a wildcard names no kind; narrow the role, or add the kinds by hand", g.role, gr)
					continue
				case group == "coordination.k8s.io" && r == "leases", r == "events" && (group == "" || group == "events.k8s.io"):
					note("left out", "%s from %s: leader election and recording, not what it reconciles", gr, g.role)
					continue
				case leader:
					note("left out", "%s from %s: a leader-election role (the ConfigMap lock), not what it reconciles", gr, g.role)
					continue
				}
				e := found[gr]
				if e == nil {
					e = &res{gr: gr, nss: map[string]bool{}}
					found[gr] = e
					order = append(order, gr)
				}
				e.nss[g.ns] = true
			}
		}
	}
	var out []any
	var grs []schema.GroupResource
	var watched []string          // the kinds granted, for --events' error
	eventsOf := map[string]bool{} // the --events keys that name one
	selectorsOf, ownersOf := map[string]bool{}, map[string]bool{}
	for _, gr := range order {
		e := found[gr]
		kd, err := k.of(gr)
		if err != nil {
			return nil, nil, err
		}
		watched = append(watched, kd.gvk.Kind)
		events, key := eventsFor(o.Events, kd.gvk)
		eventsOf[key] = true
		selectorsOf[keyOf(o.Selectors, kd.gvk)] = true
		ownersOf[keyOf(o.Owners, kd.gvk)] = true
		if slices.Contains(o.Ignore, kd.gvk.Kind) || slices.Contains(o.Ignore, kd.gvk.Group+"/"+kd.gvk.Kind) {
			note("left out", "%s: --ignore (its changes do not wake it; its own informers still see them while it runs)", kd.gvk.Kind)
			continue
		}
		r := obj{"apiVersion": kd.gvk.GroupVersion().String(), "kind": kd.gvk.Kind, "mode": "Reference"}
		var nss []string
		if !e.nss[""] {
			for ns := range e.nss {
				nss = append(nss, ns)
			}
			sort.Strings(nss)
		}
		if len(o.Namespaces) > 0 && (kd.namespaced || !kd.known) {
			nss = narrow(nss, o.Namespaces)
			if len(nss) == 0 {
				note("left out", "%s: granted only outside the namespaces asked for", kd.gvk.Kind)
				continue
			}
		}
		if len(nss) > 0 {
			r["namespaces"] = anys(nss)
		}
		if sel := pick(o.Selectors, kd.gvk); sel != "" {
			r["labelSelector"] = sel
		}
		if len(events) > 0 {
			r["events"] = anys(events)
		}
		if owner := pick(o.Owners, kd.gvk); owner != "" {
			ok, err := k.kind(owner)
			if err != nil {
				return nil, nil, fmt.Errorf("--owner %s=%s: %w", kd.gvk.Kind, owner, err)
			}
			r["owner"] = obj{"apiVersion": ok.GroupVersion().String(), "kind": ok.Kind}
		}
		where := "every namespace"
		if len(nss) > 0 {
			where = strings.Join(nss, ", ")
		}
		if kd.observedGeneration {
			r["mode"] = "Resource"
			r["skipObserved"] = obj{}
			note("likely", "%s (its CRD, in %s): updates at or below status.observedGeneration do not wake it (its CRD declares status.observedGeneration; "+
				"an operator that does not write it is woken by every update, never misses one)", kd.gvk.Kind, where)
		} else {
			note("certain", "%s in %s: it may list and watch them (%s)", kd.gvk.Kind, where, kd.source)
		}
		if o, ok := r["owner"].(obj); ok {
			note("certain", "%s: only those whose controller owner is a %s wake it (--owner)", kd.gvk.Kind, o["kind"])
		}
		if sel, ok := r["labelSelector"].(string); ok {
			note("certain", "%s: only those matching %q wake it (--selector)", kd.gvk.Kind, sel)
		}
		if len(events) > 0 {
			note("certain", "%s: only a change of type %s wakes it (--events)", kd.gvk.Kind, strings.Join(events, ", "))
		}
		out = append(out, r)
		grs = append(grs, gr)
	}
	slices.Sort(watched)
	watched = slices.Compact(watched)
	for _, f := range []struct {
		flag, want string
		keys       []string
		named      map[string]bool
	}{
		{"--events", "Kind=created,updated,deleted (any of them)", slices.Sorted(maps.Keys(o.Events)), eventsOf},
		{"--selector", "Kind=<label selector>", slices.Sorted(maps.Keys(o.Selectors)), selectorsOf},
		{"--owner", "Kind=<OwnerKind>", slices.Sorted(maps.Keys(o.Owners)), ownersOf},
	} {
		for _, key := range f.keys {
			if !f.named[key] {
				return nil, nil, fmt.Errorf("%s %s=...: it watches no %s (its roles grant list and watch of %s); want %s for one of those",
					f.flag, key, key, strings.Join(watched, ", "), f.want)
			}
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("nothing to watch: the service account's roles grant list and watch of no kind it reconciles (see the notes)")
	}
	return out, grs, nil
}

func narrow(have, want []string) []string {
	if len(have) == 0 {
		return slices.Clone(want)
	}
	var out []string
	for _, n := range have {
		if slices.Contains(want, n) {
			out = append(out, n)
		}
	}
	return out
}

// EventTypes are the types of change a resource's events may list.
var EventTypes = []string{"created", "updated", "deleted"}

// checkEvents checks the types of change Options.Events lists.
func checkEvents(m map[string][]string) error {
	for _, key := range slices.Sorted(maps.Keys(m)) {
		vs := m[key]
		if len(vs) == 0 {
			return fmt.Errorf("--events %s=: name the types of change that wake it: %s (comma-separated, any of them)", key, strings.Join(EventTypes, ", "))
		}
		for _, v := range vs {
			if !slices.Contains(EventTypes, v) {
				return fmt.Errorf("--events %s=%s: %q is no type of change; want %s (comma-separated, any of them)", key, strings.Join(vs, ","), v, strings.Join(EventTypes, ", "))
			}
		}
	}
	return nil
}

// eventsFor finds the types of change that wake it for gvk in m (keyed
// by Kind or group/Kind, as pick), in EventTypes' order and each once, and
// the key they were found under ("" none).
func eventsFor(m map[string][]string, gvk schema.GroupVersionKind) (events []string, key string) {
	key = gvk.Group + "/" + gvk.Kind
	vs, ok := m[key]
	if !ok {
		key = gvk.Kind
		if vs, ok = m[key]; !ok {
			return nil, ""
		}
	}
	for _, t := range EventTypes {
		if slices.Contains(vs, t) {
			events = append(events, t)
		}
	}
	return events, key
}

// pick finds the value for gvk in m, keyed by Kind or group/Kind.
func pick(m map[string]string, gvk schema.GroupVersionKind) string {
	return m[keyOf(m, gvk)]
}

// keyOf is the key of m that names gvk (group/Kind before Kind), "" none.
func keyOf(m map[string]string, gvk schema.GroupVersionKind) string {
	if _, ok := m[gvk.Group+"/"+gvk.Kind]; ok {
		return gvk.Group + "/" + gvk.Kind
	}
	if _, ok := m[gvk.Kind]; ok {
		return gvk.Kind
	}
	return ""
}

// metricsOf reads controller-runtime's metrics flags off the container.
func metricsOf(pod obj) obj {
	for _, c := range list(pod["containers"]) {
		args := append(strs(c["command"]), strs(c["args"])...)
		addr, secure := "", true
		for i, a := range args {
			for _, f := range []string{"--metrics-bind-address", "-metrics-bind-address", "--metrics-addr", "-metrics-addr"} {
				if v, ok := strings.CutPrefix(a, f+"="); ok {
					addr = v
				} else if a == f && i+1 < len(args) {
					addr = args[i+1]
				}
			}
			if a == "--metrics-secure=false" || a == "-metrics-secure=false" {
				secure = false
			}
		}
		if addr == "" || addr == "0" {
			continue
		}
		_, port, ok := strings.Cut(addr, ":")
		if !ok || port == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n <= 0 {
			continue
		}
		scheme := "https"
		if !secure {
			scheme = "http"
		}
		return obj{"port": int64(n), "scheme": scheme}
	}
	return nil
}

func hasArg(pod obj, flags ...string) bool {
	for _, c := range list(pod["containers"]) {
		for _, a := range append(strs(c["command"]), strs(c["args"])...) {
			for _, f := range flags {
				if a == f || a == f+"=true" || strings.TrimPrefix(a, "-") == strings.TrimPrefix(f, "-") {
					return true
				}
			}
		}
	}
	return false
}

// hubRights lets the hub read the subscribed kinds (aggregated into its
// ClusterRole) and scale the one Deployment, release its pods' Leases,
// read its pods (and, over https, their metrics).
func hubRights(o Options, ns, name string, resources []schema.GroupResource, metricsHTTPS bool, wt webhookTargets, labels obj) []map[string]any {
	var read []any
	for _, gr := range resources {
		read = append(read, obj{"apiGroups": []any{gr.Group}, "resources": []any{gr.Resource}, "verbs": []any{"get", "list", "watch"}})
	}
	if metricsHTTPS {
		read = append(read, obj{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}})
	}
	// its CA into the caBundles of the operator's rewritten configurations
	if len(wt.mutating) > 0 {
		read = append(read, obj{"apiGroups": []any{"admissionregistration.k8s.io"}, "resources": []any{"mutatingwebhookconfigurations"}, "resourceNames": anys(wt.mutating), "verbs": []any{"patch"}})
	}
	if len(wt.validating) > 0 {
		read = append(read, obj{"apiGroups": []any{"admissionregistration.k8s.io"}, "resources": []any{"validatingwebhookconfigurations"}, "resourceNames": anys(wt.validating), "verbs": []any{"patch"}})
	}
	agg := obj{}
	for k, v := range labels {
		agg[k] = v
	}
	agg[o.AggregateLabel] = "true"
	cr := obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": obj{"name": o.HubName + ":" + ns + ":" + name, "labels": agg}, "rules": read}
	roleName := o.HubName + "-target-" + name
	role := obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
		"metadata": obj{"namespace": ns, "name": roleName, "labels": labels},
		"rules": []any{
			obj{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "resourceNames": []any{name}, "verbs": []any{"get"}},
			obj{"apiGroups": []any{"apps"}, "resources": []any{"deployments/scale"}, "resourceNames": []any{name}, "verbs": []any{"get", "update", "patch"}},
			obj{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get", "list"}},
			obj{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"get", "list", "update"}},
			obj{"apiGroups": []any{"autoscaling"}, "resources": []any{"horizontalpodautoscalers"}, "verbs": []any{"list"}},
		}}
	if len(wt.services) > 0 { // admission calls: the operator's webhook Service and its CA
		role["rules"] = append(role["rules"].([]any), obj{"apiGroups": []any{""}, "resources": []any{"services"}, "resourceNames": anys(wt.services), "verbs": []any{"get"}})
	}
	if len(wt.secrets) > 0 {
		role["rules"] = append(role["rules"].([]any), obj{"apiGroups": []any{""}, "resources": []any{"secrets"}, "resourceNames": anys(wt.secrets), "verbs": []any{"get"}})
	}
	rb := obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": obj{"namespace": ns, "name": roleName, "labels": labels},
		"roleRef":  obj{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": roleName},
		"subjects": []any{obj{"kind": "ServiceAccount", "namespace": o.HubNamespace, "name": o.HubName}}}
	return []map[string]any{cr, role, rb}
}

// kind is what a resource is.
type kindOf struct {
	gvk                schema.GroupVersionKind
	namespaced, known  bool // known: namespaced is known
	observedGeneration bool // its CRD's schema has status.observedGeneration
	source             string
}

// kinds maps resources to kinds: the input's CRDs, then Kubernetes' own.
type kinds struct {
	crds    map[schema.GroupResource]kindOf
	builtin map[schema.GroupResource]schema.GroupVersionKind
}

func newKinds(objs []obj) *kinds {
	k := &kinds{crds: map[schema.GroupResource]kindOf{}, builtin: map[schema.GroupResource]schema.GroupVersionKind{}}
	for _, o := range objs {
		if o["kind"] != "CustomResourceDefinition" {
			continue
		}
		group, plural, kind := str(o, "spec", "group"), str(o, "spec", "names", "plural"), str(o, "spec", "names", "kind")
		var version string
		var observed bool
		for _, v := range list(mapAt(o, "spec")["versions"]) {
			if v["storage"] == true || version == "" {
				version = str(v, "name")
				st := mapAt(v, "schema", "openAPIV3Schema", "properties", "status", "properties")
				_, observed = st["observedGeneration"]
			}
		}
		k.crds[schema.GroupResource{Group: group, Resource: plural}] = kindOf{gvk: schema.GroupVersionKind{Group: group, Version: version, Kind: kind},
			namespaced: str(o, "spec", "scope") != "Cluster", known: true, observedGeneration: observed, source: "its CRD " + str(o, "metadata", "name")}
	}
	rank := func(v string) int { // the version a client would prefer
		switch {
		case v == "v1":
			return 0
		case v == "v2":
			return 1
		case !strings.Contains(v, "alpha") && !strings.Contains(v, "beta"):
			return 2
		case strings.Contains(v, "beta"):
			return 3
		}
		return 4
	}
	for gvk := range clientgoscheme.Scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") || gvk.Version == "__internal" || strings.HasSuffix(gvk.Kind, "Options") || gvk.Kind == "WatchEvent" {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		gr := plural.GroupResource()
		if have, ok := k.builtin[gr]; !ok || rank(gvk.Version) < rank(have.Version) {
			k.builtin[gr] = gvk
		}
	}
	return k
}

func (k *kinds) of(gr schema.GroupResource) (kindOf, error) {
	if c, ok := k.crds[gr]; ok {
		return c, nil
	}
	if gvk, ok := k.builtin[gr]; ok {
		return kindOf{gvk: gvk, namespaced: true, source: "a Kubernetes API"}, nil
	}
	return kindOf{}, fmt.Errorf("the roles grant list/watch of %s, which is neither a CRD of the input nor a Kubernetes API: "+
		"give its CRD with another -f, or narrow the role", gr)
}

// kind finds a kind by name (Kind or group/Kind) among the CRDs and
// Kubernetes' APIs.
func (k *kinds) kind(name string) (schema.GroupVersionKind, error) {
	group, kind, hasGroup := strings.Cut(name, "/")
	if !hasGroup {
		kind, group = name, ""
	}
	var found []schema.GroupVersionKind
	for _, c := range k.crds {
		if c.gvk.Kind == kind && (!hasGroup || c.gvk.Group == group) {
			found = append(found, c.gvk)
		}
	}
	if len(found) == 0 {
		for _, g := range k.builtin {
			if g.Kind == kind && (!hasGroup || g.Group == group) {
				found = append(found, g)
			}
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	if len(found) == 0 {
		return schema.GroupVersionKind{}, fmt.Errorf("no kind %s among the input's CRDs and Kubernetes' APIs", name)
	}
	return schema.GroupVersionKind{}, fmt.Errorf("kind %s is ambiguous (%v): write group/Kind", name, found)
}

func str(m obj, path ...string) string {
	for i, p := range path {
		if m == nil {
			return ""
		}
		if i == len(path)-1 {
			s, _ := m[p].(string)
			return s
		}
		m, _ = m[p].(map[string]any)
	}
	return ""
}

func mapAt(m obj, path ...string) obj {
	for _, p := range path {
		if m == nil {
			return nil
		}
		m, _ = m[p].(map[string]any)
	}
	return m
}

func list(v any) []obj {
	l, _ := v.([]any)
	var out []obj
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
