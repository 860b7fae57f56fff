package adopt

import (
	"reflect"
	"runtime"
	"strings"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/meta"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// ForeignSource is a source.Kind on a cache the project built.
type ForeignSource struct {
	GVK schema.GroupVersionKind
	// Owner is the owner kind its handler maps to when the handler is
	// controller-runtime's EnqueueRequestForOwner (nil for any other
	// handler); OnlyController says it looks at the controller owner
	// alone (OnlyControllerOwner).
	Owner          *schema.GroupKind
	OnlyController bool
	// Shared says the controller watches the kind through the manager's
	// cache too (another source of the same kind).
	Shared bool
}

// ForeignKinds are the kinds the controller watches through a cache the
// project built (ForeignSources' kinds, in order).
func (c *Controller) ForeignKinds(scheme *kruntime.Scheme) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, s := range c.ForeignSources(scheme) {
		out = append(out, s.GVK)
	}
	return out
}

// ForeignSources are the controller's sources on a cache the project built
// (source.Kind on a cache.New's cache), read before Start moves those
// sources onto the controller's Cache (see foreignCaches), with the owner
// their handler maps to. The manager cache's options do not restrict what
// such a cache holds: the hub is to watch those kinds as that cache does,
// not as the manager's ByObject says of the same kind (a project that
// reads its sources in one namespace through the manager's cache and
// watches its targets of the same kind everywhere through its own); where
// the handler maps only owned objects, the hub can send only those.
func (c *Controller) ForeignSources(scheme *kruntime.Scheme) []ForeignSource {
	watches, ok := c.startWatches()
	if !ok {
		return nil
	}
	ours := reflect.TypeFor[Cache]().PkgPath()
	var out []ForeignSource
	shared := map[schema.GroupVersionKind]bool{}
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
		t := cf.Elem().Type()
		onOurs := t.PkgPath() == ours || t.Kind() == reflect.Pointer && t.Elem().PkgPath() == ours
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
		if onOurs {
			shared[gvk] = true
			continue
		}
		fs := ForeignSource{GVK: gvk}
		fs.Owner, fs.OnlyController = ownerOf(src.FieldByName("Handler"), scheme)
		out = append(out, fs)
	}
	for i := range out {
		out[i].Shared = shared[out[i].GVK]
	}
	return out
}

// ownerOf reads the owner kind of an EnqueueRequestForOwner handler
// (controller-runtime's enqueueRequestForOwner: groupKind, isController),
// nil for any other handler. Since v0.22 the handler comes wrapped in a
// handler.Funcs of its method values (WithLowPriorityWhenUnchanged): it is
// read from the CreateFunc closure, and trusted only when its owner type
// and cached group/kind agree through the scheme.
func ownerOf(field reflect.Value, scheme *kruntime.Scheme) (*schema.GroupKind, bool) {
	if !field.IsValid() || field.Type() != reflect.TypeFor[handler.EventHandler]() || !field.CanAddr() {
		return nil, false
	}
	// The field is unexported-reached: read it through its address.
	h := *(*handler.EventHandler)(unsafe.Pointer(field.UnsafeAddr()))
	if f, ok := h.(handler.Funcs); ok {
		if f.CreateFunc == nil {
			return nil, false
		}
		fn := runtime.FuncForPC(reflect.ValueOf(f.CreateFunc).Pointer())
		if fn == nil || !strings.HasPrefix(fn.Name(), "sigs.k8s.io/controller-runtime/pkg/handler.TypedEventHandler[") || !strings.HasSuffix(fn.Name(), ".Create-fm") {
			return nil, false
		}
		// A method value of an interface is a closure {code pointer, the
		// interface value}: here the wrapped handler.EventHandler.
		closure := *(*unsafe.Pointer)(unsafe.Pointer(&f.CreateFunc))
		h = *(*handler.EventHandler)(unsafe.Add(closure, unsafe.Sizeof(uintptr(0))))
	}
	v := reflect.ValueOf(h)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().PkgPath() != reflect.TypeFor[handler.Funcs]().PkgPath() ||
		!strings.HasPrefix(v.Type().Elem().Name(), "enqueueRequestForOwner[") {
		return nil, false
	}
	recv := v.UnsafePointer()
	e := (*ownerHandler)(recv)
	if e.ownerType == nil || e.groupKind.Kind == "" {
		return nil, false
	}
	if gvk, err := apiutil.GVKForObject(e.ownerType, scheme); err != nil || gvk.GroupKind() != e.groupKind {
		return nil, false // not the layout this was written for
	}
	gk := e.groupKind
	return &gk, e.isController
}

// ownerHandler mirrors controller-runtime's enqueueRequestForOwner
// (v0.21-v0.25): its fields in order.
type ownerHandler struct {
	ownerType    kruntime.Object
	isController bool
	groupKind    schema.GroupKind
	mapper       meta.RESTMapper
}
