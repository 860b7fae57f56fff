package classic

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opzero/opzero/internal/description"
)

// cacheScope reads what a project's manager cache would hold (its
// cache.Options) as filters the hub applies before it wakes the operator:
// the namespaces and label selectors of DefaultNamespaces,
// DefaultLabelSelector and ByObject. What cannot be said that way (a
// field selector other than metadata.namespace, per-namespace selectors
// that differ) is listed in Untranslated, and there the hub watches wider:
// it never filters out what the cache would hold. Transforms and
// deep-copy settings change what the cache keeps of an object, not which
// changes reach it, so they are no filter. It returns nil when the
// options restrict nothing. A kind watched through a cache the project
// built is not narrowed by them: that use is described Everywhere (see
// everywhere).
func cacheScope(o cache.Options, scheme *runtime.Scheme) *description.CacheScope {
	s := &description.CacheScope{}
	s.Namespaces, s.LabelSelector = scopeOf("default", o.DefaultNamespaces, o.DefaultLabelSelector, o.DefaultFieldSelector, &s.Untranslated)
	for obj, b := range o.ByObject {
		gvk, err := apiutil.GVKForObject(obj, scheme)
		if err != nil {
			s.Untranslated = append(s.Untranslated, fmt.Sprintf("ByObject %T: %v", obj, err))
			continue
		}
		// What the kind leaves unset is the defaults', as controller-runtime
		// fills it in (a namespace's own selector first).
		nss, label, field := b.Namespaces, b.Label, b.Field
		if nss == nil {
			nss = o.DefaultNamespaces
		}
		if label == nil {
			label = o.DefaultLabelSelector
		}
		if field == nil {
			field = o.DefaultFieldSelector
		}
		var dropped []string
		k := description.CacheKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, LabelSet: true}
		k.Namespaces, k.LabelSelector = scopeOf(gvk.Kind, nss, label, field, &dropped)
		if b.Namespaces == nil && b.Label == nil && b.Field == nil {
			continue // the defaults' (its transform, say, is no filter)
		}
		s.Untranslated = append(s.Untranslated, dropped...)
		s.ByObject = append(s.ByObject, k)
	}
	slices.SortFunc(s.ByObject, func(a, b description.CacheKind) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Kind, b.Kind))
	})
	slices.Sort(s.Untranslated)
	if len(s.Namespaces) == 0 && s.LabelSelector == "" && len(s.ByObject) == 0 && len(s.Untranslated) == 0 {
		return nil
	}
	return s
}

// scopeOf is one set of cache options (the defaults, or a kind's
// ByObject) as namespaces and a label selector; what it cannot say goes
// to untranslated, named by what.
func scopeOf(what string, nss map[string]cache.Config, sel labels.Selector, field fields.Selector, untranslated *[]string) (namespaces []string, selector string) {
	if sel != nil && !sel.Empty() {
		selector = sel.String()
	}
	_, all := nss[cache.AllNamespaces]
	var nsSel []string // the namespaces' own label selectors
	for ns, c := range nss {
		if ns != cache.AllNamespaces {
			namespaces = append(namespaces, ns)
		}
		if c.LabelSelector != nil && !c.LabelSelector.Empty() {
			nsSel = append(nsSel, c.LabelSelector.String())
		} else {
			nsSel = append(nsSel, selector)
		}
		if c.FieldSelector != nil && !c.FieldSelector.Empty() {
			*untranslated = append(*untranslated, fmt.Sprintf("%s: the field selector %q of namespace %q", what, c.FieldSelector, ns))
		}
	}
	if all {
		namespaces = nil // every namespace, some with options of their own
	}
	slices.Sort(namespaces)
	slices.Sort(nsSel)
	switch nsSel = slices.Compact(nsSel); {
	case len(nsSel) == 1:
		selector = nsSel[0]
	case len(nsSel) > 1:
		*untranslated = append(*untranslated, fmt.Sprintf("%s: label selectors that differ by namespace", what))
		selector = ""
	}
	if field != nil && !field.Empty() {
		if ns, ok := field.RequiresExactMatch("metadata.namespace"); ok && len(field.Requirements()) == 1 && len(namespaces) == 0 {
			namespaces = []string{ns}
		} else {
			*untranslated = append(*untranslated, fmt.Sprintf("%s: the field selector %q", what, field))
		}
	}
	return namespaces, selector
}
