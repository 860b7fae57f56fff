package classic

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestCacheScope: cache.Options read as the hub's filters, never
// narrower than the cache: what a kind's ByObject leaves unset is the
// defaults' (a namespace's own selector first, as controller-runtime
// fills it in); what cannot be said is listed, and there the filter is
// wider.
func TestCacheScope(t *testing.T) {
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, c := range []struct {
		name string
		o    cache.Options
		want string // fmt of the scope: namespaces, selector, byObject, untranslated
	}{
		{"nothing restricted", cache.Options{}, "<nil>"},
		{"a transform is no filter", cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: func(o any) (any, error) { return o, nil }}}}, "<nil>"},
		{"default namespaces and selector",
			cache.Options{DefaultNamespaces: map[string]cache.Config{"b": {}, "a": {}}, DefaultLabelSelector: sel("app=x")},
			"[a b] app=x [] []"},
		{"every namespace, one with options of its own",
			cache.Options{DefaultNamespaces: map[string]cache.Config{cache.AllNamespaces: {}, "a": {UnsafeDisableDeepCopy: new(bool)}}},
			"<nil>"},
		{"a namespace field selector is a namespace",
			cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", "a")},
			"[a]  [] []"},
		{"other field selectors are not translated",
			cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("spec.nodeName", "n")},
			`[]  [] [default: the field selector "spec.nodeName=n"]`},
		{"selectors that differ by namespace are not translated",
			cache.Options{DefaultNamespaces: map[string]cache.Config{"a": {LabelSelector: sel("x=1")}, "b": {LabelSelector: sel("x=2")}}},
			"[a b]  [] [default: label selectors that differ by namespace]"},
		{"the same selector in every namespace is the selector",
			cache.Options{DefaultNamespaces: map[string]cache.Config{"a": {LabelSelector: sel("x=1")}, "b": {LabelSelector: sel("x=1")}}},
			"[a b] x=1 [] []"},
		{"a kind's own label, the default namespaces",
			cache.Options{DefaultNamespaces: map[string]cache.Config{"a": {}}, ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: sel("app=y")}}},
			"[a]  [{ v1 Secret [a] app=y true}] []"},
		{"a kind's own namespaces, the default label",
			cache.Options{DefaultLabelSelector: sel("app=x"), ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{"c": {}}}}},
			"[] app=x [{ v1 ConfigMap [c] app=x true}] []"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := cacheScope(c.o, clientgoscheme.Scheme)
			got := "<nil>"
			if s != nil {
				got = fmt.Sprintf("%v %s %v %v", s.Namespaces, s.LabelSelector, s.ByObject, s.Untranslated)
			}
			if got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
