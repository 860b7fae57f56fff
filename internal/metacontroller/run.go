package metacontroller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/clihelp"
	"github.com/opzero/opzero/internal/description"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/operator"
)

// FilesEnv names the controllers' YAML files (comma-separated files or
// folders, with the CRDs of their custom resources) an operator run with
// OPZERO_DESCRIBE describes itself from: `opzero manifests` has no cluster.
const FilesEnv = "OPZERO_METACONTROLLER_FILES"

// TokenEnv, if set, is the bearer token sent to hooks (e.g. from a Secret).
const TokenEnv = "METACONTROLLER_HOOK_TOKEN"

// ErrRestart is returned by Run when a controller changed: the process
// exits and its supervisor (Kubernetes, Knative, opzero dev) starts it again.
var ErrRestart = errors.New("the CompositeControllers or DecoratorControllers changed: restarting to watch what they name")

// Run is the operator's main: flags, then serve every CompositeController
// and DecoratorController in the cluster until ctx ends (or one changes).
func Run(ctx context.Context, args []string) error {
	fs := flag.CommandLine // where controller-runtime's config reads --kubeconfig
	var f Flags
	f.Bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: opzero-metacontroller takes only flags (see -help)", fs.Arg(0))
	}
	opts, tokenFile := f.Options, &f.TokenFile
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	opts.Scheme = scheme
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	ctrllog.SetLogger(log)
	opts.Logger = log
	if target := os.Getenv(description.Env); target != "" {
		return describe(opts, target)
	}
	if opts.Config == nil {
		c, err := config.GetConfig()
		if err != nil {
			return fmt.Errorf("no Kubernetes API server: set KUBECONFIG (e.g. from `opzero controlplane up`) or run in a cluster: %w", err)
		}
		opts.Config = c
	}
	cfg, err := loadFromCluster(ctx, opts.Config, scheme)
	if err != nil {
		return err
	}
	if opts.Mode == operator.Serverless && len(opts.AllowedSenders) > 0 {
		// the ApiServerSources EnsureRelatedSources makes send as their own OIDC identities
		opts.AllowedSenders = append(opts.AllowedSenders, cfg.relatedSenders(namespace())...)
	}
	rt, err := operator.New(opts)
	if err != nil {
		return err
	}
	rec := rt.GetEventRecorderFor("metacontroller")
	for _, w := range cfg.Warnings() {
		log.Info("unsupported field", "warning", w)
	}
	if err := ReportUnsupported(ctx, rt.GetClient(), rec, cfg); err != nil {
		log.Error(err, "reporting the unsupported fields on the controllers") // serving does not depend on it
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &Reconciler{Client: rt.GetClient(), Config: cfg, Recorder: rec,
		Hooks:    &HookClient{Token: token(*tokenFile)},
		OnChange: func(why string) { cancel(fmt.Errorf("%w (%s)", ErrRestart, why)) }}
	if err := Describe(builder.ControllerManagedBy(rt), cfg).Complete(r); err != nil {
		return err
	}
	if opts.Mode == operator.Serverless {
		did, err := EnsureRelatedSources(ctx, rt.GetClient(), cfg, namespace())
		for _, s := range did {
			log.Info("related resources", "source", s)
		}
		if err != nil { // the parents are served; their related changes are not delivered
			log.Error(err, "making event sources for the related resources the customize hooks named")
		}
	}
	log.Info("serving", "controllers", len(cfg.Controllers), "mode", string(opts.Mode))
	if err := rt.Start(ctx); err != nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrRestart) {
		return cause
	}
	return nil
}

// Flags are opzero-metacontroller's command line, in the convention of
// opzero's binaries (package clihelp; cmd/opzero's TestFlagConvention
// checks it): the operator's flags (operator.Options.BindFlags), the
// hooks' token file and controller-runtime's --kubeconfig.
type Flags struct {
	Options   operator.Options
	TokenFile string
}

// usageHead is what -help prints before the flags.
var usageHead = clihelp.Wrap("Serve Metacontroller's CompositeControllers and DecoratorControllers, "+
	"classic or serverless: one operator for every such controller in the cluster, "+
	"which reads them at start and restarts when one changes.", 0, clihelp.Width) + `

Usage:
  opzero-metacontroller [flags]

Example:
  opzero-metacontroller --mode=serverless --audience=...   # a Knative Service (opzero manifests)
  opzero-metacontroller --mode=classic                      # a Deployment

`

// Bind registers f's flags on fs and its -help; Run binds them on
// flag.CommandLine, where controller-runtime's --kubeconfig already is.
func (f *Flags) Bind(fs *flag.FlagSet) {
	f.Options.BindFlags(fs)
	fs.StringVar(&f.TokenFile, "hook-token-file", "", "a file whose content is sent to hooks as a bearer token, "+
		"read again for every call (a projected service account token rotates); env "+TokenEnv+" sends a fixed token instead")
	config.RegisterFlags(fs) // --kubeconfig, unless fs has it (flag.CommandLine has, from controller-runtime's init)
	if k := fs.Lookup(config.KubeconfigFlagName); k != nil {
		k.Usage = "kubeconfig of the cluster to use (default $KUBECONFIG, else the pod's service account, else ~/.kube/config)"
	}
	fs.Usage = clihelp.Usage(fs, usageHead)
}

func loadFromCluster(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (*Config, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	m, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: m, HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	return Load(ctx, c, m)
}

func token(file string) func(context.Context) (string, error) {
	fixed := os.Getenv(TokenEnv)
	if file == "" && fixed == "" {
		return nil
	}
	return func(context.Context) (string, error) {
		if file == "" {
			return fixed, nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--hook-token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// describe writes the operator's description from the controllers in the
// files FilesEnv names: the runtime's own description (kinds, flags,
// deploy settings), with the true resources of the kinds and the RBAC rules
// the controllers need.
func describe(opts operator.Options, target string) error {
	files := os.Getenv(FilesEnv)
	if files == "" {
		return fmt.Errorf("opzero-metacontroller describes the controllers it will serve: set %s to their YAML files or folders "+
			"(comma-separated, with the CRDs of their custom resources), e.g. %s=examples/metacontroller/helloworld", FilesEnv, FilesEnv)
	}
	cfg, err := LoadFiles(strings.Split(files, ","))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "opzero-metacontroller-describe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	inner := filepath.Join(tmp, "description.json")
	if err := os.Setenv(description.Env, inner); err != nil {
		return err
	}
	rt, err := operator.New(opts)
	if err != nil {
		return err
	}
	if err := Describe(builder.ControllerManagedBy(rt), cfg).Complete(&Reconciler{}); err != nil {
		return err
	}
	if err := rt.Start(context.Background()); err != nil {
		return err
	}
	f, err := os.Open(inner)
	if err != nil {
		return err
	}
	d, err := description.Read(f)
	f.Close()
	if err != nil {
		return err
	}
	completeDescription(&d.Operators[0], cfg)
	out := os.Stdout
	if target != "1" && target != "-" {
		if out, err = os.Create(target); err != nil {
			return err
		}
		defer out.Close()
	}
	return description.Write(out, d)
}

// completeDescription puts the true resource names and the sources' label
// selectors (kindRoles.sourceSelector) in, and the rules the
// controllers need: parents get/update/patch (finalizers), their status and
// finalizers subresources (blockOwnerDeletion); children everything a
// sync does; related resources (RelatedAnnotation) get, list, watch;
// Knative Services get (a hook's service reference); the controllers'
// status (ReportUnsupported). Warnings are the unsupported fields.
func completeDescription(d *description.Controller, cfg *Config) {
	res := map[[2]string]string{}
	var rules []description.Rule
	for _, c := range cfg.Controllers {
		for _, p := range c.Parents {
			res[[2]string{p.GVK.Group, p.GVK.Kind}] = p.GVR.Resource
			rules = append(rules, description.Rule{APIGroups: []string{p.GVK.Group}, Resources: []string{p.GVR.Resource},
				Verbs: []string{"get", "list", "watch", "update", "patch"}},
				description.Rule{APIGroups: []string{p.GVK.Group}, Resources: []string{p.GVR.Resource + "/status", p.GVR.Resource + "/finalizers"},
					Verbs: []string{"get", "update", "patch"}})
		}
		for _, ch := range c.Children {
			res[[2]string{ch.GVK.Group, ch.GVK.Kind}] = ch.GVR.Resource
			rules = append(rules, description.Rule{APIGroups: []string{ch.GVK.Group}, Resources: []string{ch.GVR.Resource},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
		}
		for _, rel := range c.Related {
			res[[2]string{rel.GVK.Group, rel.GVK.Kind}] = rel.GVR.Resource
			rules = append(rules, description.Rule{APIGroups: []string{rel.GVK.Group}, Resources: []string{rel.GVR.Resource},
				Verbs: []string{"get", "list", "watch"}})
		}
	}
	if learns := cfg.learnsRelated(); len(learns) > 0 {
		// As Metacontroller's own ClusterRole, which may do everything to
		// every resource: what a customize hook names is known only at run
		// time. Reading is all a related resource needs.
		all := description.Rule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}
		rules = append(rules, all,
			description.Rule{APIGroups: []string{"sources.knative.dev"}, Resources: []string{"apiserversources"}, Verbs: []string{"get", "create"}},
			description.Rule{APIGroups: []string{"opzero.dev"}, Resources: []string{"subscriptions"}, Verbs: []string{"get", "update"}},
			description.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"compositecontrollers", "decoratorcontrollers"}, Verbs: []string{"get"}})
		d.SourceRules = []description.Rule{all}
		for _, c := range learns {
			d.Warnings = append(d.Warnings, fmt.Sprintf("%s %s has a customize hook and no annotation %s: the operator (and, with --source=hub, the hub) may get, list and watch every resource, "+
				"because what the hook names is learned at run time (Metacontroller's own ClusterRole grants every verb on every resource); "+
				"list the resources in the annotation (e.g. %s: \"v1/configmaps, v1/namespaces\") to limit the grant to them", c.Kind, c.Name, RelatedAnnotation, RelatedAnnotation))
		}
	}
	rbac, why := rbacRules(cfg)
	rules = append(rules, rbac...)
	d.Warnings = append(d.Warnings, why...)
	rbac, why = credentialRules(cfg)
	rules = append(rules, rbac...)
	d.Warnings = append(d.Warnings, why...)
	d.Namespaces, why = cfg.hookNamespaces()
	d.Warnings = append(d.Warnings, why...)
	rules = append(rules, description.Rule{APIGroups: []string{"serving.knative.dev"}, Resources: []string{"services"}, Verbs: []string{"get"}},
		// the parents' schemas: no status field is written that they lack
		description.Rule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get"}},
		description.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"compositecontrollers/status", "decoratorcontrollers/status"},
			Verbs: []string{"get", "update", "patch"}})
	d.Warnings = append(cfg.Warnings(), d.Warnings...)
	sel := map[[2]string]string{}
	for _, k := range cfg.kinds() {
		sel[[2]string{k.gvk.Group, k.gvk.Kind}] = k.sourceSelector()
	}
	for i, k := range d.Watched {
		if r := res[[2]string{k.Group, k.Kind}]; r != "" {
			d.Watched[i].Resource = r
		}
		d.Watched[i].Selector = sel[[2]string{k.Group, k.Kind}]
	}
	d.Rules = rules
}

// namespace is the operator's own ($POD_NAMESPACE, else default).
func namespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// learnsRelated are the controllers whose related resources are learned
// at run time: a customize hook without RelatedAnnotation.
func (cfg *Config) learnsRelated() []*Controller {
	var out []*Controller
	for _, c := range cfg.Controllers {
		if c.Customize != nil && !c.Hinted {
			out = append(out, c)
		}
	}
	return out
}
