package metacontroller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// Resource is a resource resolved to its kind.
type Resource struct {
	GVR schema.GroupVersionResource
	GVK schema.GroupVersionKind
	// Namespaced is false for cluster-scoped resources.
	Namespaced bool
}

// APIVersion is the resource's group/version.
func (r Resource) APIVersion() string { return r.GVK.GroupVersion().String() }

// Child is one child (attachment) resource and how it is updated.
type Child struct {
	Resource
	Method v1alpha1.ChildUpdateMethod
}

// Decorated is one resource a DecoratorController decorates, with its selectors.
type Decorated struct {
	Resource
	Labels      labels.Selector
	Annotations labels.Selector
}

// Controller is one CompositeController or DecoratorController, resolved.
type Controller struct {
	// Kind is CompositeController or DecoratorController.
	Kind string
	Name string
	// Object is the controller as read (sent to hooks as "controller").
	Object any
	// Parents: one for a CompositeController, one or more for a DecoratorController.
	Parents  []Decorated
	Children []Child
	Sync     *v1alpha1.Hook
	Finalize *v1alpha1.Hook
	// Customize, if set, names the related objects of each parent.
	Customize *v1alpha1.Hook
	// Related are the resources named by the annotation RelatedAnnotation:
	// their changes sync every parent of the controller.
	Related []Resource
	// Hinted: the controller carries RelatedAnnotation, so Related is all
	// its customize hook names (RBAC is limited to them).
	Hinted bool
	// Learned are the resources its customize hook named at run time
	// (status.relatedResources, written by the operator), beyond Related:
	// watched as Related are.
	Learned []Resource
	// ResyncPeriodSeconds, 0 if unset.
	ResyncPeriodSeconds int32
	// Hash identifies the spec the operator started with.
	Hash string
	// Unsupported are the fields it sets that opzero does not implement
	// (reported by ReportUnsupported and `opzero manifests`).
	Unsupported []Unsupported
	// Endpoints are its spec.endpointConfigs, then spec.connections (the
	// older name): TLS and credentials per webhook host (endpoints.go).
	Endpoints []v1alpha1.EndpointConfig
}

// Finalizer is the finalizer Metacontroller puts on parents when the
// controller has a finalize hook.
func (c *Controller) Finalizer() string {
	return "metacontroller.io/" + strings.ToLower(c.Kind) + "-" + c.Name
}

// Config is every controller the operator serves.
type Config struct {
	Controllers []*Controller
	// answers are the parents' last customize answers, shared by the
	// reconciler (which writes them) and the map functions (which read them).
	answers answers
	// echoes are where the last syncs left their objects (echo.go).
	echoes echoes
}

// Mapper resolves a resource to its kind (a RESTMapper).
type Mapper interface {
	KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error)
	RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error)
}

// Load reads every CompositeController and DecoratorController from the
// cluster and resolves their resources with m.
func Load(ctx context.Context, c client.Reader, m Mapper) (*Config, error) {
	var cc v1alpha1.CompositeControllerList
	if err := c.List(ctx, &cc); err != nil {
		return nil, fmt.Errorf("listing CompositeControllers (are config/metacontroller's CRDs installed?): %w", err)
	}
	var dc v1alpha1.DecoratorControllerList
	if err := c.List(ctx, &dc); err != nil {
		return nil, fmt.Errorf("listing DecoratorControllers (are config/metacontroller's CRDs installed?): %w", err)
	}
	return resolve(cc.Items, dc.Items, m)
}

func resolve(ccs []v1alpha1.CompositeController, dcs []v1alpha1.DecoratorController, m Mapper) (*Config, error) {
	cfg := &Config{}
	var errs []error
	for i := range ccs {
		c, err := resolveComposite(&ccs[i], m)
		if err != nil {
			errs = append(errs, fmt.Errorf("CompositeController %s: %w", ccs[i].Name, err))
			continue
		}
		cfg.Controllers = append(cfg.Controllers, c)
	}
	for i := range dcs {
		c, err := resolveDecorator(&dcs[i], m)
		if err != nil {
			errs = append(errs, fmt.Errorf("DecoratorController %s: %w", dcs[i].Name, err))
			continue
		}
		cfg.Controllers = append(cfg.Controllers, c)
	}
	sort.Slice(cfg.Controllers, func(i, j int) bool {
		a, b := cfg.Controllers[i], cfg.Controllers[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return cfg, errors.Join(errs...)
}

func resolveComposite(cc *v1alpha1.CompositeController, m Mapper) (*Controller, error) {
	cc.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("CompositeController"))
	c := &Controller{Kind: "CompositeController", Name: cc.Name, Object: cc, Hash: specHash(cc.Spec, cc.Annotations),
		Unsupported: unsupportedComposite(cc), Endpoints: slices.Concat(cc.Spec.EndpointConfigs, cc.Spec.Connections)}
	p, err := resolveResource(cc.Spec.ParentResource.ResourceRule, m)
	if err != nil {
		return nil, fmt.Errorf("parentResource: %w", err)
	}
	d := Decorated{Resource: p, Labels: labels.Everything(), Annotations: labels.Everything()}
	if sel := cc.Spec.ParentResource.LabelSelector; sel != nil {
		if d.Labels, err = metav1.LabelSelectorAsSelector(sel); err != nil {
			return nil, fmt.Errorf("parentResource.labelSelector: %w", err)
		}
	}
	c.Parents = []Decorated{d}
	for i, r := range cc.Spec.ChildResources {
		res, err := resolveResource(r.ResourceRule, m)
		if err != nil {
			return nil, fmt.Errorf("childResources[%d]: %w", i, err)
		}
		ch := Child{Resource: res, Method: v1alpha1.ChildUpdateOnDelete}
		if r.UpdateStrategy != nil && r.UpdateStrategy.Method != "" {
			ch.Method = r.UpdateStrategy.Method
		}
		if err := checkMethod(ch.Method); err != nil {
			return nil, fmt.Errorf("childResources[%d]: %w", i, err)
		}
		c.Children = append(c.Children, ch)
	}
	if h := cc.Spec.Hooks; h != nil {
		c.Sync, c.Finalize, c.Customize = h.Sync, h.Finalize, h.Customize
	}
	if c.Customize != nil && c.Customize.Webhook == nil {
		return nil, errors.New("hooks.customize has no webhook")
	}
	if c.Sync == nil || c.Sync.Webhook == nil {
		return nil, errors.New("hooks.sync.webhook is required")
	}
	if c.Related, err = relatedResources(cc.Annotations, m); err != nil {
		return nil, err
	}
	_, c.Hinted = cc.Annotations[RelatedAnnotation]
	c.Learned = learnedResources(c, cc.Status.RelatedResources, m)
	if cc.Spec.ResyncPeriodSeconds != nil {
		c.ResyncPeriodSeconds = *cc.Spec.ResyncPeriodSeconds
	}
	return c, nil
}

func resolveDecorator(dc *v1alpha1.DecoratorController, m Mapper) (*Controller, error) {
	dc.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("DecoratorController"))
	c := &Controller{Kind: "DecoratorController", Name: dc.Name, Object: dc, Hash: specHash(dc.Spec, dc.Annotations),
		Unsupported: unsupportedDecorator(dc), Endpoints: slices.Concat(dc.Spec.EndpointConfigs, dc.Spec.Connections)}
	if len(dc.Spec.Resources) == 0 {
		return nil, errors.New("resources is empty")
	}
	for i, r := range dc.Spec.Resources {
		res, err := resolveResource(r.ResourceRule, m)
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		d := Decorated{Resource: res, Labels: labels.Everything(), Annotations: labels.Everything()}
		if r.LabelSelector != nil {
			if d.Labels, err = metav1.LabelSelectorAsSelector(r.LabelSelector); err != nil {
				return nil, fmt.Errorf("resources[%d].labelSelector: %w", i, err)
			}
		}
		if a := r.AnnotationSelector; a != nil {
			if d.Annotations, err = metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: a.MatchAnnotations, MatchExpressions: a.MatchExpressions}); err != nil {
				return nil, fmt.Errorf("resources[%d].annotationSelector: %w", i, err)
			}
		}
		c.Parents = append(c.Parents, d)
	}
	for i, r := range dc.Spec.Attachments {
		res, err := resolveResource(r.ResourceRule, m)
		if err != nil {
			return nil, fmt.Errorf("attachments[%d]: %w", i, err)
		}
		ch := Child{Resource: res, Method: v1alpha1.ChildUpdateOnDelete}
		if r.UpdateStrategy != nil && r.UpdateStrategy.Method != "" {
			ch.Method = r.UpdateStrategy.Method
		}
		if err := checkMethod(ch.Method); err != nil {
			return nil, fmt.Errorf("attachments[%d]: %w", i, err)
		}
		c.Children = append(c.Children, ch)
	}
	if h := dc.Spec.Hooks; h != nil {
		c.Sync, c.Finalize, c.Customize = h.Sync, h.Finalize, h.Customize
	}
	if c.Customize != nil && c.Customize.Webhook == nil {
		return nil, errors.New("hooks.customize has no webhook")
	}
	if c.Sync == nil || c.Sync.Webhook == nil {
		return nil, errors.New("hooks.sync.webhook is required")
	}
	var err error
	if c.Related, err = relatedResources(dc.Annotations, m); err != nil {
		return nil, err
	}
	_, c.Hinted = dc.Annotations[RelatedAnnotation]
	c.Learned = learnedResources(c, dc.Status.RelatedResources, m)
	if dc.Spec.ResyncPeriodSeconds != nil {
		c.ResyncPeriodSeconds = *dc.Spec.ResyncPeriodSeconds
	}
	return c, nil
}

// RelatedAnnotation, on a CompositeController or DecoratorController, lists
// the resources its customize hook may name, comma-separated as
// <apiVersion>/<resource> ("v1/configmaps, apps/v1/deployments"): an
// optional hint. The operator watches them from the start, and `opzero
// manifests` makes their sources and limits the operator's read grant to
// them (without it, a controller with a customize hook gets read on every
// resource, as Metacontroller's own ClusterRole). What the hook names
// beyond them is learned at run time all the same.
const RelatedAnnotation = "opzero.dev/related-resources"

func relatedResources(ann map[string]string, m Mapper) ([]Resource, error) {
	v, ok := ann[RelatedAnnotation]
	if !ok {
		return nil, nil
	}
	var out []Resource
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		i := strings.LastIndex(item, "/")
		if i <= 0 {
			return nil, fmt.Errorf("annotation %s: %q: want <apiVersion>/<resource>, e.g. v1/configmaps or apps/v1/deployments", RelatedAnnotation, item)
		}
		res, err := resolveResource(v1alpha1.ResourceRule{APIVersion: item[:i], Resource: item[i+1:]}, m)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", RelatedAnnotation, err)
		}
		out = append(out, res)
	}
	return out, nil
}

func checkMethod(m v1alpha1.ChildUpdateMethod) error {
	switch m {
	case v1alpha1.ChildUpdateOnDelete, v1alpha1.ChildUpdateRecreate, v1alpha1.ChildUpdateInPlace,
		v1alpha1.ChildUpdateRollingRecreate, v1alpha1.ChildUpdateRollingInPlace:
		return nil
	}
	return fmt.Errorf("updateStrategy.method %q: want OnDelete, Recreate, InPlace, RollingRecreate or RollingInPlace", m)
}

func resolveResource(r v1alpha1.ResourceRule, m Mapper) (Resource, error) {
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil || r.APIVersion == "" {
		return Resource{}, fmt.Errorf("apiVersion %q: want group/version (or v1)", r.APIVersion)
	}
	if r.Resource == "" {
		return Resource{}, errors.New("resource is empty: want the plural, e.g. pods")
	}
	gvr := gv.WithResource(r.Resource)
	gvk, err := m.KindFor(gvr)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %s in %s: %w (is its CRD installed?)", r.Resource, r.APIVersion, err)
	}
	out := Resource{GVR: gvr, GVK: gvk, Namespaced: true}
	if rm, err := m.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		out.Namespaced = rm.Scope.Name() == meta.RESTScopeNameNamespace
	}
	return out, nil
}

// specHash identifies what the operator serves of a controller: its spec
// and its RelatedAnnotation.
func specHash(spec any, ann map[string]string) string {
	return hash([]any{spec, ann[RelatedAnnotation]})
}

func hash(spec any) string {
	b, _ := json.Marshal(spec)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}
