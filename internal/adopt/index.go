package adopt

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// IndexField records an index, which Indexed applies to lists: with no
// informer store to index, a List that selects on an indexed field lists
// without that requirement and keeps the objects whose index values hold
// the wanted one (what the cache's index would have returned).
func (c *Cache) IndexField(ctx context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	if c.root != nil {
		return c.root.IndexField(ctx, obj, field, fn)
	}
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("IndexField(%s, %q): the indexer function is nil", gvk.Kind, field)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.indexes[gvk] == nil {
		c.indexes[gvk] = map[string]client.IndexerFunc{}
	}
	if _, dup := c.indexes[gvk][field]; dup {
		return fmt.Errorf("IndexField(%s, %q): already indexed", gvk.Kind, field)
	}
	c.indexes[gvk][field] = fn
	return nil
}

func (c *Cache) index(gvk schema.GroupVersionKind, field string) client.IndexerFunc {
	if c.root != nil {
		return c.root.index(gvk, field)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.indexes[gvk][field]
}

// Indexed wraps cl so that its List applies the indexes IndexField
// recorded (equality requirements on indexed fields); everything else
// passes through.
func (c *Cache) Indexed(cl client.Client) client.Client {
	if cl == nil {
		return nil
	}
	return &indexed{Client: cl, c: c}
}

type indexed struct {
	client.Client
	c *Cache
}

type wanted struct {
	fn    client.IndexerFunc
	value string
}

func (i *indexed) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	if lo.FieldSelector == nil || lo.FieldSelector.Empty() {
		return i.Client.List(ctx, list, opts...)
	}
	gvk, err := apiutil.GVKForObject(list, i.c.scheme)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	var keep []fields.Selector
	var want []wanted
	for _, r := range lo.FieldSelector.Requirements() {
		fn := i.c.index(gvk, r.Field)
		if fn == nil || (r.Operator != selection.Equals && r.Operator != selection.DoubleEquals) {
			keep = append(keep, fields.OneTermEqualSelector(r.Field, r.Value))
			if r.Operator == selection.NotEquals {
				keep[len(keep)-1] = fields.OneTermNotEqualSelector(r.Field, r.Value)
			}
			continue
		}
		want = append(want, wanted{fn: fn, value: r.Value})
	}
	if len(want) == 0 {
		return i.Client.List(ctx, list, opts...)
	}
	lo.FieldSelector = fields.AndSelectors(keep...)
	if err := i.Client.List(ctx, list, lo); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	var out []runtime.Object
	for _, it := range items {
		o, ok := it.(client.Object)
		if ok && matches(o, want) {
			out = append(out, it)
		}
	}
	return meta.SetList(list, out)
}

func matches(o client.Object, want []wanted) bool {
	for _, w := range want {
		if !slices.Contains(w.fn(o), w.value) {
			return false
		}
	}
	return true
}
