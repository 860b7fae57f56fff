package manifests

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/knativenames"
)

// Knative Serving's autoscaling annotations (on spec.template.metadata).
const (
	annMinScale  = "autoscaling.knative.dev/min-scale"
	annMaxScale  = "autoscaling.knative.dev/max-scale"
	annRetention = "autoscaling.knative.dev/scale-to-zero-pod-retention-period"
	annWindow    = "autoscaling.knative.dev/window"
	annClass     = "autoscaling.knative.dev/class"
	annMetric    = "autoscaling.knative.dev/metric"
)

// serviceURL is the operator's cluster-local address (the wakeup sink).
func (g *gen) serviceURL() string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local", g.name(), g.o.Namespace)
}

// senders are the identities whose tokens the operator accepts: the OIDC
// service accounts Knative creates for the sources and the trigger that
// deliver to it, and the wakeup source's own service account; with the hub,
// the hub's service account instead of the sources' and the wakeup source's.
func (g *gen) senders() []string {
	sa := func(name string) string { return "system:serviceaccount:" + g.o.Namespace + ":" + name }
	var out []string
	if g.o.Mode == Classic { // only the Triggers deliver to a classic operator
		for _, t := range g.triggerNames() {
			out = append(out, sa(knativenames.OIDCServiceAccount(t, "eventing.knative.dev", "Trigger")))
		}
		sort.Strings(out)
		return out
	}
	if g.o.hub() { // the hub sends the events, sweeps and wakeups
		out = append(out, hubSender())
	} else {
		if g.viaHub() { // the hub forwards the admission webhooks' calls
			out = append(out, hubSender())
		}
		for _, k := range g.sourceKinds() {
			out = append(out, sa(knativenames.OIDCServiceAccount(g.sourceName(k.Kind), "sources.knative.dev", "ApiServerSource")))
		}
		for _, p := range g.sweeps() {
			out = append(out, sa(knativenames.OIDCServiceAccount(p.name, "sources.knative.dev", "PingSource")))
		}
		if g.o.durable() {
			out = append(out, sa(g.wakeupSourceName()))
		}
	}
	for _, t := range g.triggerNames() {
		out = append(out, sa(knativenames.OIDCServiceAccount(t, "eventing.knative.dev", "Trigger")))
	}
	sort.Strings(out)
	return out
}

// sourceKind is a kind an ApiServerSource watches, and how.
type sourceKind struct {
	description.Kind
	mode  string
	owned bool
	owner description.Kind // with owned: the owner's kind, the source's owner filter
	// referrer (hub only): the primary kind whose field Kind.ReferencedBy
	// names the objects; nil when some user of the kind made no such
	// promise, or two promised different things.
	referrer *description.Kind
	// skip (hub only): the kind is only ever a primary, and every
	// controller reconciling it skips observed generations this way.
	skip *description.Skip
	// events (hub only): the types of change that wake the operator
	// (Options.HubEvents), in HubEventTypes' order; nil every type.
	events []string
}

// sourceKinds lists the ApiServerSources: Resource mode for the primary and
// owned kinds (the engine needs the object, and the owner), Reference mode
// for watched kinds (map functions take name and namespace). With several
// controllers, one source per kind serves them all: Resource mode if any
// needs the object, an owner filter only if every one that uses the kind
// owns it under one owner kind, a label selector only if every one has it,
// a referrer only if every one watches it through the same field of the
// same primary kind, an update filter (updatedWhen) only if every one has
// one (the union of their parts), skipping observed generations only if every one
// reconciles it as its primary and skips, and the types of change
// (events) only if every one names some (the union of them).
func (g *gen) sourceKinds() []sourceKind {
	var out []sourceKind
	at := map[[4]string]int{}
	use := func(k description.Kind, mode string, owner, referrer *description.Kind, skip *description.Skip) {
		id := [4]string{k.Group, k.Version, k.Kind}
		if nss, sel := g.in.Cache.For(k.Group, k.Kind); k.Everywhere && g.o.hub() && (len(nss) > 0 || sel != "") {
			// Through a cache of the operator's own, where the manager's
			// cache holds the kind in part: the hub's Subscription says
			// this use apart, not narrowed by the manager cache's scope
			// (ApiServerSources watch every namespace anyway, one per
			// kind).
			id[3] = "everywhere"
		}
		sk := sourceKind{Kind: k, mode: mode, owned: owner != nil, skip: skip}
		if g.o.hub() {
			sk.events, _ = hubEventsFor(g.o.HubEvents, k)
		}
		if owner != nil {
			sk.owner = *owner
		}
		if referrer != nil && k.ReferencedBy != "" {
			sk.referrer = referrer
		}
		i, seen := at[id]
		if !seen {
			at[id] = len(out)
			out = append(out, sk)
			return
		}
		have := &out[i]
		if mode == "Resource" {
			have.mode = "Resource"
		}
		if have.owned && (owner == nil || !sameKind(have.owner, *owner)) {
			have.owned, have.owner = false, description.Kind{}
		}
		if have.Selector != k.Selector {
			have.Selector = ""
		}
		have.Everywhere = have.Everywhere || k.Everywhere
		if have.referrer != nil && (sk.referrer == nil || !sameKind(*have.referrer, *sk.referrer) || have.ReferencedBy != k.ReferencedBy) {
			have.referrer, have.ReferencedBy = nil, ""
		}
		if len(have.UpdatedWhen) == 0 || len(k.UpdatedWhen) == 0 {
			have.UpdatedWhen = nil // some use of the kind wants every update
		} else {
			have.UpdatedWhen = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(have.UpdatedWhen), k.UpdatedWhen...))))
		}
		if len(have.events) == 0 || len(sk.events) == 0 {
			have.events = nil // some use of the kind wants every type of change
		} else {
			have.events = canonicalEvents(append(slices.Clone(have.events), sk.events...))
		}
		switch {
		case have.skip == nil || skip == nil:
			have.skip = nil
		default:
			have.skip = &description.Skip{OnLabelChange: have.skip.OnLabelChange || skip.OnLabelChange,
				OnAnnotationChange: have.skip.OnAnnotationChange || skip.OnAnnotationChange}
		}
	}
	for _, op := range g.ops {
		use(op.Primary, "Resource", nil, nil, op.Skip)
	}
	for _, op := range g.ops {
		for _, k := range op.Owned {
			mode := "Resource"
			if k.Everywhere && g.o.hub() {
				mode = "Reference" // a cache of the operator's own, most often metadata-only: the hub need not hold every object whole
			}
			use(k, mode, &op.Primary, nil, nil)
		}
		for _, k := range op.Watched {
			use(k, "Reference", nil, &op.Primary, nil)
		}
	}
	return out
}

// hubEventsFor finds k's types of change in m (keyed by Kind or
// group/Kind), in HubEventTypes' order and each once, and the key they
// were found under ("" none).
func hubEventsFor(m map[string][]string, k description.Kind) (events []string, key string) {
	key = k.Group + "/" + k.Kind
	vs, ok := m[key]
	if !ok {
		key = k.Kind
		if vs, ok = m[key]; !ok {
			return nil, ""
		}
	}
	return canonicalEvents(vs), key
}

func canonicalEvents(vs []string) []string {
	var out []string
	for _, t := range HubEventTypes {
		if slices.Contains(vs, t) {
			out = append(out, t)
		}
	}
	return out
}

// checkHubEvents: every kind --hub-events names is one the operator
// watches, and a bare Kind names one group's.
func (g *gen) checkHubEvents() error {
	if len(g.o.HubEvents) == 0 {
		return nil
	}
	groups := map[string][]string{} // the --hub-events keys -> the groups of the kinds they name
	var watched []string
	for _, k := range g.sourceKinds() {
		watched = append(watched, k.Kind.Kind)
		if _, key := hubEventsFor(g.o.HubEvents, k.Kind); key != "" && !slices.Contains(groups[key], k.Group) {
			groups[key] = append(groups[key], k.Group)
		}
	}
	slices.Sort(watched)
	for _, key := range slices.Sorted(maps.Keys(g.o.HubEvents)) {
		switch gs := groups[key]; {
		case len(gs) == 0:
			return fmt.Errorf("--hub-events %s=...: the operator watches no %s (it watches %s); want Kind=created,updated,deleted (any of them) for one of those",
				key, key, strings.Join(slices.Compact(watched), ", "))
		case len(gs) > 1:
			slices.Sort(gs)
			var named []string
			for _, gr := range gs {
				named = append(named, gr+"/"+key)
			}
			return fmt.Errorf("--hub-events %s=...: the operator watches %s of %d groups: write group/Kind (%s)", key, key, len(gs), strings.Join(named, ", "))
		}
	}
	return nil
}

func sameKind(a, b description.Kind) bool {
	return a.APIVersion() == b.APIVersion() && a.Kind == b.Kind
}

// sweep is one PingSource.
type sweep struct{ name, schedule, data string }

// sweeps are the PingSources that are scheduled: no data is the
// anti-entropy sweep, {"sweep":"all"} the full one (see engine/serverless
// route.go).
func (g *gen) sweeps() []sweep {
	var out []sweep
	for _, s := range []sweep{
		{g.name() + "-sweep", g.op.Deploy.Sweep, ""},
		{g.name() + "-full-sweep", g.op.Deploy.FullSweep, `{"sweep":"all"}`},
	} {
		if s.schedule != "" {
			out = append(out, s)
		}
	}
	return out
}

func (g *gen) wakeupSourceName() string { return g.name() + "-wakeup-source" }

// sink is a sink reference to the operator: its Knative Service, or in
// classic mode the Service in front of its events endpoint.
func (g *gen) sink() map[string]any {
	ref := map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": g.name()}
	if g.o.Mode == Classic {
		ref = map[string]any{"apiVersion": "v1", "kind": "Service", "name": g.name()}
	}
	return map[string]any{"ref": ref, "audience": g.o.Audience}
}

// Knative's stable window: its default and its least (config-autoscaler's
// stable-window, the autoscaling.knative.dev/window annotation).
const (
	defaultStableWindow = 60 * time.Second
	minStableWindow     = 6 * time.Second
)

// idleAnnotations are the autoscaling annotations that keep an idle
// instance for idle. Real Knative (v0.50.0, kpa's scaler) scales a
// revision to zero once its stable window has seen no request, and then
// keeps the last pod until it has been inactive for the retention period
// (the grace period overlaps: the activator is already in the path). So
// the instance stays window + retention: below the default window of
// 60 s, the window alone (at least Knative's 6 s); above it, the default
// window and the rest as retention. The retention alone, as --idle once
// wrote, kept the pod for the default window first (measured: ~2 min for
// --idle=6s, 13 s with window and retention 6 s each, on this cluster).
func idleAnnotations(idle time.Duration) map[string]any {
	if idle < defaultStableWindow {
		return map[string]any{annWindow: max(idle, minStableWindow).String()}
	}
	if idle == defaultStableWindow {
		return nil
	}
	return map[string]any{annRetention: (idle - defaultStableWindow).String()}
}

// hubTokenVolume holds the operator's token for the hub's audience, with
// which a starting instance announces itself (package starting).
const hubTokenVolume = "opzero-hub-token"

// service is the operator as a Knative Service that scales to zero.
func (g *gen) service() Object {
	d := g.op.Deploy
	ann := map[string]any{
		annClass:    "kpa.autoscaling.knative.dev",
		annMetric:   "concurrency",
		annMinScale: strconv.Itoa(d.MinScale),
		annMaxScale: strconv.Itoa(d.MaxScale),
	}
	if g.o.Idle > 0 {
		maps.Copy(ann, idleAnnotations(g.o.Idle))
	}
	args := []any{"--mode=serverless", "--audience=" + g.o.Audience, "--allowed-senders=" + strings.Join(g.senders(), ",")}
	if g.o.hub() {
		// The hub tells what its filters held back (an object that became
		// referenced) and when it may have missed something (its epoch),
		// and the engine serves from the cache only while one instance
		// runs alone: reads of owned and watched objects from what events
		// delivered (serverless package documentation). A binary
		// without the flag (an adopted project's own flag set) runs
		// without it.
		if g.hasFlag("event-cache") {
			args = append(args, "--event-cache")
		}
	}
	if g.o.durable() {
		args = append(args, "--wakeup-sink="+g.serviceURL())
	}
	if g.hasFlag(projectProbeFlag) {
		// Knative probes the serving port, which has the checks; instances
		// side by side (opzero dev) must not all bind the project's port.
		args = append(args, "--"+projectProbeFlag+"=0")
	}
	env := []any{
		map[string]any{"name": "OPZERO_MAX_SCALE", "value": envMaxScale(d.MaxScale)},
		// a literal: Knative's webhook refuses fieldRef unless the
		// kubernetes.podspec-fieldref feature is on
		map[string]any{"name": "POD_NAMESPACE", "value": g.o.Namespace},
	}
	if g.o.hub() {
		// A starting instance tells the hub's replicas where it listens,
		// with its service account's token for the hub (the volume
		// below): the hub delivers to it before Knative finds it ready.
		env = append(env, map[string]any{"name": "OPZERO_HUB_PEERS", "value": hubPeersAddress()})
	}
	if p := g.in.Probes; p != "" && p != "0" && !g.hasFlag(projectProbeFlag) {
		// The project sets its probe address its own way (a flag of its
		// own): the checks are on the serving port already, and instances
		// side by side (opzero dev) must not all bind that address.
		env = append(env, map[string]any{"name": description.ProbeAddressEnv, "value": "0"})
	}
	if _, set := envLiteral(g.env, enableWebhooksEnv); g.in.Webhooks != nil && !g.viaHub() && !set {
		// the webhooks Deployment serves them (webhooks.go)
		env = append(env, map[string]any{"name": enableWebhooksEnv, "value": "false"})
	}
	container := g.container(map[string]any{
		"name":  "operator",
		"image": g.o.Image,
		"ports": []any{map[string]any{"containerPort": int64(8080)}},
	}, args, env)
	// The engine answers /healthz from the server that takes the events:
	// an instance whose server hangs is taken out and restarted. (Knative
	// probes the container's port; no port may be named.) The readiness
	// probe has no period: Knative's aggressive probing, queue-proxy
	// probing every 50 ms from the container's start, as for a Knative
	// Service without a probe (knative.dev/serving pkg/queue/readiness;
	// with a period set it probes once per kubelet probe instead, and a
	// first probe that comes too early costs a whole period at each cold
	// start). Knative refuses timeoutSeconds and failureThreshold on it.
	container["readinessProbe"] = map[string]any{"httpGet": map[string]any{"path": "/healthz"}}
	container["livenessProbe"] = httpProbe("/healthz", nil, 3)
	l := g.labels("operator")
	svc := object("serving.knative.dev/v1", "Service", g.o.Namespace, g.name(), l)
	pod := map[string]any{
		"serviceAccountName":   g.name(),
		"containerConcurrency": int64(d.Concurrency),
		"timeoutSeconds":       int64(g.o.TimeoutSeconds),
		"containers":           []any{container},
	}
	if g.o.hub() {
		container["volumeMounts"] = []any{map[string]any{"name": hubTokenVolume, "mountPath": starting.TokenDir, "readOnly": true}}
		pod["volumes"] = []any{map[string]any{"name": hubTokenVolume, "projected": map[string]any{"sources": []any{
			map[string]any{"serviceAccountToken": map[string]any{"audience": starting.Audience, "expirationSeconds": int64(3600), "path": "token"}}}}}}
	}
	svc["spec"] = map[string]any{"template": map[string]any{
		"metadata": map[string]any{"labels": l, "annotations": ann},
		"spec":     pod,
	}}
	return Object{File: FileOperator, Obj: svc}
}

// apiServerSources is one ApiServerSource per kind, each with its own
// ServiceAccount allowed only get/list/watch on that kind. The primary kind
// and owned kinds are sent in Resource mode (the engine reads the object's
// generation, and the controller owner of a dependent); watched kinds in
// Reference mode (the map function gets name and namespace and reads the
// rest itself: smaller events, no object contents in flight).
func (g *gen) apiServerSources() []Object {
	var objs []Object
	for _, k := range g.sourceKinds() {
		name := g.sourceName(k.Kind)
		res := map[string]any{"apiVersion": k.APIVersion(), "kind": k.Kind.Kind}
		if sel := labelSelector(k.Selector); sel != nil {
			res["selector"] = sel
		}
		spec := map[string]any{
			"mode":               k.mode,
			"resources":          []any{res},
			"serviceAccountName": name,
			"namespaceSelector":  map[string]any{}, // all namespaces
			"sink":               g.sink(),
		}
		if k.owned {
			spec["owner"] = map[string]any{"apiVersion": k.owner.APIVersion(), "kind": k.owner.Kind}
		}
		l := g.labels("source")
		src := object("sources.knative.dev/v1", "ApiServerSource", g.o.Namespace, name, l)
		src["spec"] = spec
		objs = append(objs, Object{File: FileSources, Obj: src})
		objs = append(objs, serviceAccount(g.o.Namespace, name, l))
		var r rules
		r.add(k.Group, g.resource(k.Kind), readVerbs...)
		objs = append(objs, clusterRole(g.clusterName(strings.ToLower(k.Kind.Kind)+"-source"), g.o.Namespace, name, r.list(), l)...)
	}
	return objs
}

// labelSelector turns a selector's string form into a LabelSelector map.
func labelSelector(s string) map[string]any {
	if s == "" {
		return nil
	}
	ls, err := metav1.ParseToLabelSelector(s)
	if err != nil {
		return nil // the binary printed it from a parsed selector: cannot happen
	}
	out := map[string]any{}
	if len(ls.MatchLabels) > 0 {
		ml := map[string]any{}
		for k, v := range ls.MatchLabels {
			ml[k] = v
		}
		out["matchLabels"] = ml
	}
	var exprs []any
	for _, e := range ls.MatchExpressions {
		m := map[string]any{"key": e.Key, "operator": string(e.Operator)}
		if len(e.Values) > 0 {
			vals := make([]any, 0, len(e.Values))
			for _, v := range sortedStrings(e.Values) {
				vals = append(vals, v)
			}
			m["values"] = vals
		}
		exprs = append(exprs, m)
	}
	if len(exprs) > 0 {
		out["matchExpressions"] = exprs
	}
	return out
}

// pingSources are the sweeps.
func (g *gen) pingSources() []Object {
	var objs []Object
	for _, p := range g.sweeps() {
		spec := map[string]any{"sink": g.sink()}
		schedule := p.schedule
		if tz, rest, ok := strings.Cut(schedule, " "); ok && strings.HasPrefix(tz, "CRON_TZ=") {
			spec["timezone"], schedule = strings.TrimPrefix(tz, "CRON_TZ="), strings.TrimSpace(rest)
		}
		spec["schedule"] = schedule
		if p.data != "" {
			spec["contentType"], spec["data"] = "application/json", p.data
		}
		ps := object("sources.knative.dev/v1", "PingSource", g.o.Namespace, p.name, g.labels("sweep"))
		ps["spec"] = spec
		objs = append(objs, Object{File: FileSources, Obj: ps})
	}
	return objs
}

// wakeupSource is the wakeup source (cmd/wakeup-source) as a Deployment with its own
// ServiceAccount: list/watch/delete Wakeups, and tokens of itself only.
func (g *gen) wakeupSource() []Object {
	name := g.wakeupSourceName()
	l := g.labels("wakeup-source")
	sel := map[string]any{"app.kubernetes.io/name": g.op.Name, "app.kubernetes.io/component": "wakeup-source"}
	dep := object("apps/v1", "Deployment", g.o.Namespace, name, l)
	dep["spec"] = map[string]any{
		"replicas": int64(1),
		"selector": map[string]any{"matchLabels": sel},
		"template": map[string]any{
			"metadata": map[string]any{"labels": l},
			"spec": map[string]any{
				"serviceAccountName": name,
				"containers": []any{map[string]any{
					"name":  "wakeup-source",
					"image": g.o.WakeupImage,
					"args": []any{"--operator=" + strings.ReplaceAll(controllerNames(g.ops), ", ", ","), "--audience=" + g.o.Audience,
						"--service-account=" + g.o.Namespace + "/" + name, fmt.Sprintf("--health-addr=:%d", wakeupHealthPort)},
					"ports": []any{map[string]any{"name": "health", "containerPort": int64(wakeupHealthPort)}},
					// /healthz fails once its watch of Wakeups has been down
					// for 2 minutes (a reflector that no longer lists nor
					// watches): kubelet restarts it. /readyz: listed once.
					"livenessProbe":  httpProbe("/healthz", "health", 3),
					"readinessProbe": httpProbe("/readyz", "health", 1),
				}},
			},
		},
	}
	var cluster, own rules
	cluster.add("opzero.dev", "wakeups", wakeupSourceVerbs...)
	own.addNamed("", "serviceaccounts/token", name, "create")
	objs := []Object{{File: FileWakeup, Obj: dep}, inFile(FileWakeup, serviceAccount(g.o.Namespace, name, l))}
	for _, o := range clusterRole(g.clusterName("wakeup-source"), g.o.Namespace, name, cluster.list(), l) {
		objs = append(objs, inFile(FileWakeup, o))
	}
	for _, o := range role(name, g.o.Namespace, name, own.list(), l) {
		objs = append(objs, inFile(FileWakeup, o))
	}
	return objs
}

func inFile(f string, o Object) Object { o.File = f; return o }

// The probe ports of the classic operator (controller-runtime's health
// probe server) and of the wakeup source (--health-addr).
const (
	classicProbePort = 8081
	wakeupHealthPort = 8081
)

// httpProbe is an HTTP GET probe every 10 s (kubelet's default period),
// failing after failures in a row; port nil probes the container's port
// (Knative Services).
func httpProbe(path string, port any, failures int64) map[string]any {
	get := map[string]any{"path": path}
	if port != nil {
		get["port"] = port
	}
	return map[string]any{"httpGet": get, "periodSeconds": int64(10), "timeoutSeconds": int64(1), "failureThreshold": failures}
}

// envMaxScale is OPZERO_MAX_SCALE for Knative's max-scale n: n itself, -1
// for 0 (unbounded), which the operator would take for one instance.
func envMaxScale(n int) string {
	if n == 0 {
		return "-1"
	}
	return strconv.Itoa(n)
}
