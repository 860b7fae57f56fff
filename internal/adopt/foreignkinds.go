package adopt

import (
	"reflect"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ForeignKinds are the kinds the controller watches through a cache the
// project built (source.Kind on a cache.New's cache), read before Start
// moves those sources onto the controller's Cache (see foreignCaches).
// The manager cache's options do not restrict what such a cache holds:
// the hub is to watch those kinds as that cache does, not as the
// manager's ByObject says of the same kind (a project that reads its
// sources in one namespace through the manager's cache and watches its
// targets of the same kind everywhere through its own).
func (c *Controller) ForeignKinds(scheme *runtime.Scheme) []schema.GroupVersionKind {
	v := reflect.ValueOf(c.ctrl)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	watches := v.Elem().FieldByName("startWatches")
	if !watches.IsValid() || watches.Kind() != reflect.Slice {
		return nil
	}
	ours := reflect.TypeFor[Cache]().PkgPath()
	var out []schema.GroupVersionKind
	for i := range watches.Len() {
		src := watches.Index(i)
		for src.Kind() == reflect.Interface || src.Kind() == reflect.Pointer {
			if src.IsNil() {
				break
			}
			src = src.Elem()
		}
		if src.Kind() != reflect.Struct {
			continue
		}
		cf, tf := src.FieldByName("Cache"), src.FieldByName("Type")
		if !cf.IsValid() || cf.Kind() != reflect.Interface || cf.IsNil() || !tf.IsValid() || !tf.CanAddr() {
			continue
		}
		if t := cf.Elem().Type(); t.PkgPath() == ours || t.Kind() == reflect.Pointer && t.Elem().PkgPath() == ours {
			continue
		}
		// Reached through the controller's unexported startWatches: read
		// through its address.
		obj, ok := reflect.NewAt(tf.Type(), unsafe.Pointer(tf.UnsafeAddr())).Elem().Interface().(client.Object)
		if !ok || obj == nil || reflect.ValueOf(obj).IsNil() {
			continue
		}
		gvk := obj.GetObjectKind().GroupVersionKind() // a PartialObjectMetadata's TypeMeta
		if gvk.Kind == "" {
			var err error
			if gvk, err = apiutil.GVKForObject(obj, scheme); err != nil {
				continue
			}
		}
		out = append(out, gvk)
	}
	return out
}
