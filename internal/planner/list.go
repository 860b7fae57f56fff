package planner

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// overlayList applies entries (objects of list's item kind the plan
// wrote) to list as the API server returned it: a written object
// replaces its item, a deleted one drops it, a created one that matches
// the list's namespace and label selector is added. Field selectors are
// not applied to what the plan adds. used is told of each entry applied.
func overlayList(list client.ObjectList, item schema.GroupVersionKind, lo *client.ListOptions, entries []keyed, used func(okey, int)) error {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil // not a list opzero can edit: as the API server answered
	}
	byKey := map[okey]keyed{}
	for _, e := range entries {
		byKey[e.k] = e // a reconcile's own entry comes last and wins
	}
	out := make([]runtime.Object, 0, len(items))
	for _, it := range items {
		acc, err := meta.Accessor(it)
		if err != nil {
			out = append(out, it)
			continue
		}
		k := okey{group: item.Group, kind: item.Kind, namespace: acc.GetNamespace(), name: acc.GetName()}
		e, ok := byKey[k]
		if !ok {
			out = append(out, it)
			continue
		}
		delete(byKey, k)
		used(k, e.e.round)
		if e.e.deleted {
			continue
		}
		n, err := newItem(list, it, item, e.e.raw)
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	for _, e := range entries {
		if _, ok := byKey[e.k]; !ok || e.e.deleted || !e.e.created {
			continue
		}
		delete(byKey, e.k)
		if lo.Namespace != "" && e.k.namespace != lo.Namespace {
			continue
		}
		n, err := newItem(list, nil, item, e.e.raw)
		if err != nil {
			return err
		}
		if !matches(lo.LabelSelector, n) {
			continue
		}
		used(e.k, e.e.round)
		out = append(out, n)
	}
	return meta.SetList(list, out)
}

func matches(sel labels.Selector, obj runtime.Object) bool {
	if sel == nil || sel.Empty() {
		return true
	}
	acc, err := meta.Accessor(obj)
	return err == nil && sel.Matches(labels.Set(acc.GetLabels()))
}

// newItem decodes raw into a new item of list's item type (like, if
// given, else the Items field's element type).
func newItem(list client.ObjectList, like runtime.Object, item schema.GroupVersionKind, raw []byte) (runtime.Object, error) {
	var t reflect.Type
	if like != nil {
		t = reflect.TypeOf(like)
	} else {
		f := reflect.ValueOf(list).Elem().FieldByName("Items")
		if !f.IsValid() || f.Kind() != reflect.Slice {
			return nil, fmt.Errorf("%T has no Items", list)
		}
		t = reflect.PointerTo(f.Type().Elem())
	}
	if t.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("list item %s is not a pointer", t)
	}
	obj, ok := reflect.New(t.Elem()).Interface().(client.Object)
	if !ok {
		return nil, fmt.Errorf("list item %s is not a client.Object", t)
	}
	if err := decode(raw, obj, item); err != nil {
		return nil, err
	}
	return obj, nil
}
