package metacontroller

import (
	"context"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// Name is the operator's name (its Service, its sources' prefix).
const Name = "metacontroller"

// Describe adds what the operator watches to b: CompositeControllers are
// the primary kind (a change restarts the operator), DecoratorControllers,
// and every parent, decorated, child, attachment and related
// (RelatedAnnotation) resource once, each with one map function that knows
// every role the kind plays.
func Describe(b *builder.Builder, cfg *Config) *builder.Builder {
	b = b.Named(Name).For(&v1alpha1.CompositeController{}).
		Watches(&v1alpha1.DecoratorController{}, func(_ context.Context, _ client.Reader, o client.Object) ([]reconcile.Request, error) {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: decoratorPrefix + o.GetName()}}}, nil
		})
	for _, k := range cfg.kinds() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(k.gvk)
		b = b.Watches(u, k.mapFunc)
	}
	return b
}

// kindRoles is what one kind is to the controllers.
type kindRoles struct {
	gvk     schema.GroupVersionKind
	parents []parentRole // controllers whose parent (decorated) resource it is
	childOf []*Controller
	// relatedOf are controllers whose RelatedAnnotation names the kind,
	// or whose customize hook has named it (Learned).
	relatedOf []*Controller
	// memo holds the parents' last customize answers.
	memo *answers
	// echoes: where the last syncs left the objects.
	echoes *echoes
}

type parentRole struct {
	c *Controller
	d Decorated
}

func (cfg *Config) kinds() []*kindRoles {
	by := map[schema.GroupVersionKind]*kindRoles{}
	get := func(g schema.GroupVersionKind) *kindRoles {
		if by[g] == nil {
			by[g] = &kindRoles{gvk: g, memo: &cfg.answers, echoes: &cfg.echoes}
		}
		return by[g]
	}
	for _, c := range cfg.Controllers {
		for _, p := range c.Parents {
			k := get(p.GVK)
			k.parents = append(k.parents, parentRole{c, p})
		}
		for _, ch := range c.Children {
			k := get(ch.GVK)
			k.childOf = append(k.childOf, c)
		}
		for _, rel := range append(append([]Resource(nil), c.Related...), c.Learned...) {
			k := get(rel.GVK)
			k.relatedOf = append(k.relatedOf, c)
		}
	}
	out := make([]*kindRoles, 0, len(by))
	for _, k := range by {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvk.String() < out[j].gvk.String() })
	return out
}

// sourceSelector is the label selector (string form) an event source of
// the kind may filter by: the parents' labelSelector when the kind is only
// a parent (or decorated) resource and every controller of it selects the
// same labels; else "" (every object: a child, related object or another
// controller's parent must not be filtered out). The map function and the
// sync still check every selector, annotations included.
func (k *kindRoles) sourceSelector() string {
	if len(k.childOf) > 0 || len(k.relatedOf) > 0 || len(k.parents) == 0 {
		return ""
	}
	s := ""
	for i, p := range k.parents {
		if p.d.Labels == nil || p.d.Labels.Empty() {
			return ""
		}
		if i > 0 && p.d.Labels.String() != s {
			return ""
		}
		s = p.d.Labels.String()
	}
	return s
}

func (p parentRole) key(ns, name string) reconcile.Request {
	if !p.d.Namespaced {
		ns = ""
	}
	if p.c.Kind == "CompositeController" {
		return CompositeKey(p.c.Name, ns, name)
	}
	return DecoratorKey(p.c.Name, p.d, ns, name)
}

// mapFunc maps an object of the kind to the parents to sync. There may be
// no cache, and in Reference mode obj carries only its name: what is
// missing is read; a deleted child whose owner is unknown syncs every
// parent in its namespace that may own it.
func (k *kindRoles) mapFunc(ctx context.Context, c client.Reader, obj client.Object) ([]reconcile.Request, error) {
	var out []reconcile.Request
	add := func(r reconcile.Request) {
		for _, h := range out {
			if h == r {
				return
			}
		}
		out = append(out, r)
	}
	// A related object syncs the parents whose last customize answer
	// selects it, and those whose answer this process has not seen (every
	// parent in its namespace; all, if it or they are cluster-scoped, or
	// the customize hook is v2).
	lbls := objectLabels(ctx, c, k.gvk, obj)
	for _, ctl := range k.relatedOf {
		ns := obj.GetNamespace()
		if isV2(ctl.Customize) {
			ns = "" // a v2 customize hook may relate a parent to any namespace's objects
		}
		for _, d := range ctl.Parents {
			keys, err := listParents(ctx, c, parentRole{ctl, d}, ns)
			if err != nil {
				return nil, err
			}
			for _, r := range keys {
				if k.selectedBy(ctl, r, obj, lbls) {
					add(r)
				}
			}
		}
	}
	if len(k.parents) == 0 && len(k.childOf) == 0 {
		return out, nil
	}
	full := obj.GetResourceVersion() != "" // Resource mode, or classic: the whole object
	var meta client.Object = obj
	gone := false
	if !full {
		pom := &metav1.PartialObjectMetadata{}
		pom.SetGroupVersionKind(k.gvk)
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), pom); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, err
			}
			gone = true
		}
		meta = pom
	}
	if !gone && len(k.parents) > 0 {
		k.echoes.settle(ctx, string(meta.GetUID()))
	}
	for _, p := range k.parents {
		if !gone && p.d.matches(meta) && !k.echoes.is(p.c.Kind+"/"+p.c.Name, k.gvk.GroupKind(), meta) {
			add(p.key(obj.GetNamespace(), obj.GetName()))
		}
	}
	if len(k.childOf) == 0 {
		return out, nil
	}
	if gone {
		for _, ctl := range k.childOf {
			for _, d := range ctl.Parents {
				keys, err := listParents(ctx, c, parentRole{ctl, d}, obj.GetNamespace())
				if err != nil {
					return nil, err
				}
				for _, r := range keys {
					add(r)
				}
			}
		}
		return out, nil
	}
	ref := metav1.GetControllerOfNoCopy(meta)
	if ref == nil {
		return out, nil
	}
	k.echoes.settle(ctx, string(ref.UID))
	if k.echoes.is(string(ref.UID), k.gvk.GroupKind(), meta) && (!full || k.exists(ctx, c, meta)) {
		return out, nil // as its parent's last sync left it (a deletion, in classic, carries that version too)
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	for _, ctl := range k.childOf {
		for _, d := range ctl.Parents {
			if d.GVK.Group == gv.Group && d.GVK.Kind == ref.Kind {
				add(parentRole{ctl, d}.key(obj.GetNamespace(), ref.Name))
			}
		}
	}
	return out, nil
}

// listParents is every parent (selected object) of p in namespace ns.
func listParents(ctx context.Context, c client.Reader, p parentRole, ns string) ([]reconcile.Request, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(p.d.GVK.GroupVersion().WithKind(p.d.GVK.Kind + "List"))
	var opts []client.ListOption
	if p.d.Namespaced {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	var out []reconcile.Request
	for i := range list.Items {
		if p.d.matches(&list.Items[i]) {
			out = append(out, p.key(list.Items[i].Namespace, list.Items[i].Name))
		}
	}
	return out, nil
}

// selectedBy: the parent of request r may have obj among its related
// objects (its last customize answer selects it, or is not known here).
func (k *kindRoles) selectedBy(ctl *Controller, r reconcile.Request, obj client.Object, lbls func() (map[string]string, bool)) bool {
	name := r.Name[strings.LastIndex(r.Name, "/")+1:]
	sels, ok := k.memo.get(answerKey(ctl, r.Namespace, name))
	if !ok {
		return true
	}
	for _, s := range sels {
		if s.selects(k.gvk.GroupKind(), obj.GetNamespace(), obj.GetName(), lbls) {
			return true
		}
	}
	return false
}

// exists reads obj from the API server (a deleted object's event carries
// its last version).
func (k *kindRoles) exists(ctx context.Context, c client.Reader, obj client.Object) bool {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.gvk)
	return c.Get(ctx, client.ObjectKeyFromObject(obj), u) == nil
}
