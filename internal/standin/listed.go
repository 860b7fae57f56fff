package standin

import (
	"context"
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Listed keeps the objects of one kind that the Lists of a map function
// returned (the mapping of a watched object to the primaries it concerns,
// which usually lists them), so that each primary it maps to may stand in
// for the reconcile's first Get of it as an event's object does: read from
// the API server moments before, under the same rule (Versions.Current;
// a write that conflicts reconciles again from the API server).
//
// The Client records the Lists made with a context that carries it (With):
// the engine passes such a context to the map function, which lists
// through the Client it is given or, as a controller-runtime map function
// closing over its reconciler's client does, through that one.
type Listed struct {
	gvk  schema.GroupVersionKind
	mu   sync.Mutex
	objs map[types.NamespacedName]client.Object
}

// NewListed records the listed objects of kind gvk.
func NewListed(gvk schema.GroupVersionKind) *Listed {
	return &Listed{gvk: gvk, objs: map[types.NamespacedName]client.Object{}}
}

type listedKey struct{}

// With returns ctx carrying l: the Client's Lists with it are recorded.
func (l *Listed) With(ctx context.Context) context.Context {
	return context.WithValue(ctx, listedKey{}, l)
}

// recordList records list's items if ctx carries a Listed (Client.List).
func recordList(ctx context.Context, c client.Client, list client.ObjectList) {
	if l, _ := ctx.Value(listedKey{}).(*Listed); l != nil {
		l.record(list, c.Scheme())
	}
}

// record keeps list's items if it is a list of the kind l records (by its
// apiVersion and kind, else by its Go type in scheme) with whole objects
// (not a metadata-only list).
func (l *Listed) record(list client.ObjectList, scheme *runtime.Scheme) {
	if _, ok := list.(*metav1.PartialObjectMetadataList); ok {
		return // metadata only: no object to stand in
	}
	gvk := list.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		gvk, _ = apiutil.GVKForObject(list, scheme)
	}
	if gvk.GroupKind() != (schema.GroupKind{Group: l.gvk.Group, Kind: l.gvk.Kind + "List"}) {
		return
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			l.objs[client.ObjectKeyFromObject(o)] = o
		}
	}
}

// Take returns the object key as listed, in JSON, and its version; nil if
// no List returned it.
func (l *Listed) Take(key types.NamespacedName) ([]byte, string) {
	l.mu.Lock()
	o := l.objs[key]
	l.mu.Unlock()
	if o == nil || o.GetResourceVersion() == "" {
		return nil, ""
	}
	o = o.DeepCopyObject().(client.Object)
	o.GetObjectKind().SetGroupVersionKind(l.gvk)
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, ""
	}
	return raw, o.GetResourceVersion()
}
