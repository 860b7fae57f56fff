package manifests

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/opzero/opzero/internal/description"
)

// WakeupPackage holds the Wakeup type (its CRD ships with durable time)
// and the Subscription type (its CRD ships with --source=hub).
const WakeupPackage = "github.com/opzero/opzero/api/v1alpha1"

// Input is everything Generate derives objects from.
type Input struct {
	// ImportPath of the operator's main package (the default ko:// image).
	ImportPath string
	// Operator is the operator deployed: with several controllers in the
	// binary, one that stands for them all (Combine).
	Operator description.Controller
	// Operators are the binary's controllers when there are several: one
	// Service runs them all, with the sources of all their kinds.
	Operators []description.Controller
	// CRDs of kinds in the description (and the Wakeup CRD for durable time).
	CRDs []GeneratedCRD
	// MarkerRules are the +kubebuilder:rbac rules of the module's packages
	// the binary is built from (its reconcilers', its API types', ...).
	MarkerRules []rbacv1.PolicyRule
	// ProjectRole is the project's own config/rbac/role.yaml (kubebuilder's
	// make manifests writes it), if it has one: its rules are checked
	// against the generated role (a warning for each it grants more).
	ProjectRole *ProjectRole
	// Flags are the operator binary's flags (extra arguments are checked
	// against them; none: not checked).
	Flags []string
	// Webhooks are the binary's webhooks (nil: none), Mutating and
	// Validating its packages' +kubebuilder:webhook markers.
	Webhooks   *description.Webhooks
	Mutating   []admissionregv1.MutatingWebhook
	Validating []admissionregv1.ValidatingWebhook
	// WebhookSources are where its Go files declare and register
	// webhooks (errors name them).
	WebhookSources WebhookSources
	// Cache is an adopted project's cache options (nil: it restricts
	// nothing): its Subscription asks the hub for no more than the cache
	// holds.
	Cache *description.CacheScope
	// Probes is an adopted project's health probe address
	// (description.Description.Probes).
	Probes string
}

// Build describes the operator in Go package pkg (resolved in dir),
// generates the CRDs of its kinds whose Go types live in the operator's own
// module, reads its reconciler's RBAC markers, and returns the objects.
func Build(ctx context.Context, dir, pkg string, o Options) ([]Object, error) {
	if err := o.checkModeSource(); err != nil {
		return nil, err
	}
	t, err := Describe(ctx, dir, pkg)
	if err != nil {
		return nil, err
	}
	if err := checkUnserved(t, o); err != nil {
		return nil, err
	}
	var derived map[string]bool // kinds whose events the project's predicates give
	if o.hub() && len(t.Desc.Operators) > 0 {
		o.HubEvents, derived = withDerivedEvents(o, &t.Desc, t.Desc.Operators[0].Name, t.Dir)
	}
	if o.Warnings != nil {
		for _, op := range t.Desc.Operators {
			for _, w := range op.Warnings {
				fmt.Fprintf(o.Warnings, "warning: %s: %s\n", op.Name, w)
			}
			if o.Mode != Classic {
				for _, n := range op.Notes {
					fmt.Fprintf(o.Warnings, "note: %s: %s\n", op.Name, n)
				}
			}
		}
		if o.hub() {
			for _, op := range t.Desc.Operators {
				for _, k := range append(append([]description.Kind{op.Primary}, op.Owned...), op.Watched...) {
					wakes := "every " + k.Kind + " update wakes it"
					if len(k.UpdatedWhen) > 0 {
						wakes = "a " + k.Kind + " update wakes it when it changes the object's " + strings.Join(k.UpdatedWhen, " or ")
					}
					for _, u := range k.Unfiltered {
						if derived[k.Group+"/"+k.Kind] && strings.HasPrefix(u, funcsNote) {
							continue // said by withDerivedEvents' note
						}
						fmt.Fprintf(o.Warnings, "warning: %s: %s: its %s is no filter the hub applies: %s, and the filter runs after\n", op.Name, k.Kind, u, wakes)
					}
				}
			}
		}
		if c := t.Desc.Cache; c != nil && o.hub() {
			for _, u := range c.Untranslated {
				fmt.Fprintf(o.Warnings, "warning: %s: its cache option %s is no filter the hub applies: the hub wakes it for changes its cache then drops\n", t.ImportPath, u)
			}
		}
	}
	in, err := Prepare(ctx, t, o)
	if err != nil {
		return nil, err
	}
	return Generate(in, o)
}

// Prepare runs controller-gen for a description: CRDs and marker rules.
func Prepare(ctx context.Context, t *Target, o Options) (Input, error) {
	if o.Mode == Classic && t.Desc.ServerlessOnly {
		return Input{}, fmt.Errorf("--mode=classic: %s is serverless only (its main does not import github.com/opzero/opzero/operator/classic), "+
			"so the Deployment would fail to start; add  import _ \"github.com/opzero/opzero/operator/classic\"  to its package main, or generate serverless manifests", t.ImportPath)
	}
	if o.Mode != Classic && !o.webhooksViaHub() && t.WebhooksDespiteEnv != "" {
		return Input{}, t.errWebhooksDespiteEnv()
	}
	mod, err := goCmd(ctx, t.Dir, "list", "-m", "-f", "{{.Path}}")
	if err != nil {
		return Input{}, fmt.Errorf("finding the operator's Go module: %w", err)
	}
	mod = strings.TrimSpace(mod)
	op, err := Combine(path.Base(mod), t.Desc.Operators)
	if err != nil {
		return Input{}, fmt.Errorf("%s: %w", t.ImportPath, err)
	}
	want := map[[2]string]bool{} // group, kind
	pkgs := map[string]bool{}
	for _, c := range t.Desc.Operators {
		for _, k := range allKinds(c) {
			if k.GoPackage == mod || strings.HasPrefix(k.GoPackage, mod+"/") {
				pkgs[k.GoPackage] = true
				want[[2]string{k.Group, k.Kind}] = true
			}
		}
	}
	if o.Mode != Classic && !o.NoDurableTime {
		pkgs[WakeupPackage] = true
		want[[2]string{"opzero.dev", "Wakeup"}] = true
	}
	if o.hub() || (t.Desc.Webhooks != nil && o.webhooksViaHub()) { // the hub runs: it watches Subscriptions
		pkgs[WakeupPackage] = true
		want[[2]string{"opzero.dev", "Subscription"}] = true
	}
	var mut []admissionregv1.MutatingWebhook
	var val []admissionregv1.ValidatingWebhook
	mpkgs, err := modulePackageList(ctx, t.Dir, t.ImportPath, mod)
	if err != nil {
		return Input{}, err
	}
	sources, err := scanWebhookSources(t.Dir, mpkgs)
	if err != nil {
		return Input{}, err
	}
	var converted []description.ConversionKind
	if w := t.Desc.Webhooks; w != nil {
		converted = w.Conversion
		var ips []string
		for _, p := range mpkgs {
			ips = append(ips, p.ImportPath)
		}
		if mut, val, err = WebhookMarkers(t.Dir, ips...); err != nil {
			return Input{}, err
		}
	} else if len(sources.MarkerPaths) > 0 {
		return Input{}, errMarkersNotRegistered(t.ImportPath, sources)
	}
	// A kind in several versions: its CRD has every version (the
	// conversion's, or None when they are the same: checkVersions).
	for _, k := range append(slices.Clone(converted), t.Desc.Versions...) {
		for _, v := range k.Versions {
			if want[[2]string{k.Group, k.Kind}] || slices.ContainsFunc(converted, func(c description.ConversionKind) bool { return c.Group == k.Group && c.Kind == k.Kind }) {
				if v.GoPackage == mod || strings.HasPrefix(v.GoPackage, mod+"/") {
					pkgs[v.GoPackage] = true
					want[[2]string{k.Group, k.Kind}] = true
				}
			}
		}
	}
	// The project's kinds with the project's own crd options (its
	// Makefile's controller-gen line), opzero's with none.
	root, err := goCmd(ctx, t.Dir, "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return Input{}, fmt.Errorf("finding the operator's Go module: %w", err)
	}
	root = strings.TrimSpace(root)
	rendered, err := readProjectManifests(t.Dir, o.ProjectManifests)
	if err != nil {
		return Input{}, err
	}
	crdOpts, optsFile, err := ProjectCRDOptions(root)
	if err != nil {
		return Input{}, fmt.Errorf("reading the project's controller-gen options: %w", err)
	}
	var own, theirs []string
	for _, p := range sortedKeys(pkgs) {
		if p == WakeupPackage {
			own = append(own, p)
		} else {
			theirs = append(theirs, p)
		}
	}
	crds, err := GenerateCRDsWith(t.Dir, crdOpts, theirs...)
	if err != nil {
		return Input{}, err
	}
	if crdOpts != "" {
		optsFile = relTo(t.Dir, optsFile)
	} else {
		optsFile = ""
	}
	warnLargeCRDs(o.Warnings, crds, optsFile)
	ownCRDs, err := GenerateCRDs(t.Dir, own...)
	if err != nil {
		return Input{}, err
	}
	crds = append(crds, ownCRDs...)
	sort.Slice(crds, func(i, j int) bool { return crds[i].File < crds[j].File })
	var wanted []GeneratedCRD
	for _, c := range crds {
		if want[[2]string{c.CRD.Spec.Group, c.CRD.Spec.Names.Kind}] {
			wanted = append(wanted, c)
		}
	}
	wanted, err = projectCRDsFor(root, t.Dir, rendered, want, wanted, o.Warnings)
	if err != nil {
		return Input{}, err
	}
	if err := checkVersions(ctx, t.Dir, wanted, append(slices.Clone(converted), t.Desc.Versions...), converted); err != nil {
		return Input{}, fmt.Errorf("%s: %w", t.ImportPath, err)
	}
	in := Input{ImportPath: t.ImportPath, Operator: op, Flags: t.Desc.Flags, Webhooks: t.Desc.Webhooks, Mutating: mut, Validating: val, WebhookSources: sources, CRDs: wanted,
		Cache: t.Desc.Cache, Probes: t.Desc.Probes}
	if w := t.Desc.Webhooks; w != nil { // those the project declares in YAML, not with markers
		var marked []string
		for _, m := range mut {
			marked = append(marked, webhookPath(m.ClientConfig))
		}
		for _, v := range val {
			marked = append(marked, webhookPath(v.ClientConfig))
		}
		pm, pv, files, err := ProjectWebhooks(root, t.Dir, rendered, w.Paths, marked)
		if err != nil {
			return Input{}, err
		}
		in.Mutating, in.Validating = append(in.Mutating, pm...), append(in.Validating, pv...)
		for name, f := range files {
			if in.WebhookSources.MarkerNames == nil {
				in.WebhookSources.MarkerNames = map[string]string{}
			}
			in.WebhookSources.MarkerNames[name] = f
		}
	}
	if len(t.Desc.Operators) > 1 {
		in.Operators = t.Desc.Operators
	}
	// one controller-gen run reads the markers of every package of the
	// module the binary is built from that has some, as the project's own
	// `controller-gen rbac paths=./...` reads them (a reconciler's, its API
	// package's, a helper's), and the reconciler packages
	recs := map[string]bool{}
	for _, c := range t.Desc.Operators {
		if p := c.ReconcilerPackage; p != "" && p != "main" {
			recs[p] = true
		}
	}
	for _, p := range sources.RBACMarked {
		recs[p] = true
	}
	if in.MarkerRules, err = MarkerRules(t.Dir, sortedKeys(recs)...); err != nil {
		return Input{}, err
	}
	in.ProjectRole = joinRoles(ReadProjectRole(root, t.Dir), renderedRole(rendered))
	return in, nil
}

// Generate derives the objects from in; see the package doc.
func Generate(in Input, o Options) ([]Object, error) {
	op := in.Operator
	name := operatorName(o.Project, op.Name)
	o, err := o.withDefaults(name, in.ImportPath)
	if err != nil {
		return nil, err
	}
	env, err := userEnv(op.Env, o.Env)
	if err != nil {
		return nil, err
	}
	if err := checkArgs(o.Args, in.Flags); err != nil {
		return nil, err
	}
	g := &gen{in: in, o: o, op: op, ops: in.Operators, env: env, plural: map[[2]string]string{}}
	if g.project, err = readProject(o, name, env); err != nil {
		return nil, err
	}
	if len(g.ops) == 0 {
		g.ops = []description.Controller{op}
	}
	for _, c := range in.CRDs {
		g.plural[[2]string{c.CRD.Spec.Group, c.CRD.Spec.Names.Kind}] = c.CRD.Spec.Names.Plural
	}
	if !o.hub() { // one source per kind, named after it
		if err := g.checkNames(); err != nil {
			return nil, err
		}
	}
	if err := g.checkEvents(); err != nil {
		return nil, err
	}
	if err := g.checkHubEvents(); err != nil {
		return nil, err
	}
	if err := g.checkWebhooks(); err != nil {
		return nil, err
	}
	var objs []Object
	var ca []byte // the webhooks' CA bundle
	if in.Webhooks != nil {
		var wh []Object
		if wh, ca, err = g.webhooks(); err != nil {
			return nil, err
		}
		objs = append(objs, wh...)
	}
	for _, c := range in.CRDs {
		o, err := g.crdObject(c, ca)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	objs = append(objs, g.operatorRBAC()...)
	if o.Mode == Classic {
		objs = append(objs, g.deployment())
		if len(op.Events) > 0 {
			objs = append(objs, g.eventsService())
			objs = append(objs, g.broker()...)
		}
	} else {
		objs = append(objs, g.service())
		if o.hub() {
			objs = append(objs, g.hubWiring()...)
		} else {
			if g.viaHub() && !o.NoHub { // the hub serves the webhooks
				objs = append(objs, HubObjects(o.HubImage)...)
			}
			objs = append(objs, g.apiServerSources()...)
			objs = append(objs, g.pingSources()...)
			if o.durable() {
				objs = append(objs, g.wakeupSource()...)
			}
		}
		if g.brokerName() != "" {
			objs = append(objs, g.broker()...)
		}
	}
	objs = append(objs, g.namespaces(objs)...)
	objs = g.project.apply(objs, o.Namespace)
	sortObjects(objs)
	return objs, nil
}

type gen struct {
	in Input
	o  Options
	op description.Controller
	// ops are the controllers the Service runs: op alone, or several.
	ops []description.Controller
	// env is the operator's own env: declared, then from the command line.
	env    []description.EnvVar
	plural map[[2]string]string
	// project is what the project's config/ declares (Options.Project),
	// checked and merged: nil without one.
	project *project
}

// name names the operator's objects: the controller's name (or the
// binary's, for several), after config/'s namePrefix.
func (g *gen) name() string { return operatorName(g.o.Project, g.op.Name) }

func (g *gen) resource(k description.Kind) string {
	if p := g.plural[[2]string{k.Group, k.Kind}]; p != "" {
		return p
	}
	return k.Resource
}

func (g *gen) labels(component string) map[string]any {
	return map[string]any{"app.kubernetes.io/name": g.op.Name, "app.kubernetes.io/component": component,
		"app.kubernetes.io/managed-by": "opzero"}
}

// clusterName names a cluster-scoped object: unique per namespace and operator.
func (g *gen) clusterName(suffix string) string {
	n := "opzero:" + g.o.Namespace + ":" + g.name()
	if suffix != "" {
		n += "-" + suffix
	}
	return n
}

// sourceName names the ApiServerSource of kind k (also its ServiceAccount).
func (g *gen) sourceName(k description.Kind) string { return g.name() + "-" + strings.ToLower(k.Kind) }

// checkNames rejects two kinds that would get the same source name.
func (g *gen) checkNames() error {
	seen := map[string]description.Kind{}
	for _, sk := range g.sourceKinds() {
		k := sk.Kind
		n := g.sourceName(k)
		if prev, ok := seen[n]; ok {
			return fmt.Errorf("kinds %s/%s and %s/%s would both be watched by a source named %s; opzero manifests needs distinct kind names",
				prev.APIVersion(), prev.Kind, k.APIVersion(), k.Kind, n)
		}
		seen[n] = k
	}
	return nil
}

func allKinds(op description.Controller) []description.Kind {
	out := append([]description.Kind{op.Primary}, op.Owned...)
	return append(out, op.Watched...)
}

// operatorRBAC is the operator's ServiceAccount, ClusterRole (kinds,
// events, wakeups, tokenreviews, markers) and Role (leases).
func (g *gen) operatorRBAC() []Object {
	var r rules
	primaries := map[[2]string]bool{}
	for _, op := range g.ops {
		p := op.Primary
		res := g.resource(p)
		primaries[[2]string{p.Group, res}] = true
		r.add(p.Group, res, g.primaryWrites(p.Group, res, primaryVerbs)...)
		r.add(p.Group, res+"/status", statusVerbs...)
		r.add(p.Group, res+"/finalizers", g.primaryWrites(p.Group, res+"/finalizers", finalizerVerbs)...)
		for _, k := range append(append([]description.Kind(nil), op.Owned...), op.Watched...) {
			r.add(k.Group, g.resource(k), readVerbs...)
		}
	}
	r.add("", "events", eventVerbs...)
	r.add("events.k8s.io", "events", eventVerbs...)
	if g.o.durable() {
		r.add("opzero.dev", "wakeups", wakeupVerbs...)
	}
	if g.o.Mode == Serverless || len(g.op.Events) > 0 { // the events endpoint checks tokens
		r.add("authentication.k8s.io", "tokenreviews", "create")
	}
	r.addRules(g.markerRules())
	r.addRules(describedRules(g.op.Rules))
	var leases rules
	leases.add("coordination.k8s.io", "leases", leaseVerbs...)
	l := g.labels("operator")
	objs := []Object{serviceAccount(g.o.Namespace, g.name(), l)}
	WarnRoleGaps(g.o.Warnings, g.name(), g.in.ProjectRole, r.list())
	cluster, byNS, narrowed := scopeToProject(r.list(), g.in.ProjectRole, g.o.Namespace, primaries)
	if len(narrowed) > 0 && g.o.Warnings != nil {
		fmt.Fprintf(g.o.Warnings, "note: %s: granted as the project's %s grants it, in those namespaces only (a Role in each, not the ClusterRole): %s\n",
			g.name(), g.in.ProjectRole.File, strings.Join(narrowed, "; "))
	}
	objs = append(objs, clusterRole(g.clusterName(""), g.o.Namespace, g.name(), cluster, l)...)
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		objs = append(objs, roleFor(g.name()+"-scoped", ns, g.o.Namespace, g.name(), byNS[ns], l)...)
	}
	return append(objs, role(g.name()+"-leases", g.o.Namespace, g.name(), leases.list(), l)...)
}

// primaryWrites are the verbs granted on the reconciled kind (or its
// finalizers): all of verbs, unless the project has a role of its own
// (config/rbac/role.yaml, --project-manifests), which says what its
// reconciler writes: then the reads, and the writes that role grants.
// opzero itself writes only the status (status.observedGeneration).
func (g *gen) primaryWrites(group, resource string, verbs []string) []string {
	pr := g.in.ProjectRole
	if pr == nil || pr.Err != nil {
		return verbs
	}
	var out []string
	for _, v := range verbs {
		if slices.Contains(readVerbs, v) || grants(pr.all(), group, resource, v, nil) {
			out = append(out, v)
		}
	}
	return out
}

// describedRules are the rules the operator's description names.
func describedRules(in []description.Rule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(in))
	for _, r := range in {
		out = append(out, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs, ResourceNames: r.ResourceNames})
	}
	return out
}

func sortedStrings(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

// markerRules are the reconciler's marker rules; in classic mode a get or
// list also needs list and watch, because the manager's client reads
// through an informer cache.
func (g *gen) markerRules() []rbacv1.PolicyRule {
	if g.o.Mode != Classic {
		return g.in.MarkerRules
	}
	out := make([]rbacv1.PolicyRule, 0, len(g.in.MarkerRules))
	for _, r := range g.in.MarkerRules {
		r = *r.DeepCopy()
		for _, v := range r.Verbs {
			if v == "get" || v == "list" {
				r.Verbs = append(r.Verbs, "list", "watch")
				break
			}
		}
		out = append(out, r)
	}
	return out
}

// namespaces are Namespace objects for the namespaces the operator's
// environment expects (description Namespaces), but for the operator's own
// (created by whoever deploys it) and those objs already have.
func (g *gen) namespaces(objs []Object) []Object {
	have := map[string]bool{g.o.Namespace: true}
	for _, o := range objs {
		if o.Kind() == "Namespace" {
			have[o.Name()] = true
		}
	}
	var out []Object
	for _, ns := range g.op.Namespaces {
		if !have[ns] {
			have[ns] = true
			out = append(out, Object{File: FileNamespace, Obj: object("v1", "Namespace", "", ns, g.labels("namespace"))})
		}
	}
	return out
}
