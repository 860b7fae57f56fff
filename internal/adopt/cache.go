package adopt

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Cache is a cache.Cache with no store: reads go to the API server
// (Reader, which should be Indexed so that field indexes apply), and GetInformer returns an Informer shim per kind that records
// the event handlers registered on it.
type Cache struct {
	client.Reader
	scheme *runtime.Scheme

	// root, for a Fork, holds the field indexes.
	root *Cache

	mu        sync.Mutex
	informers map[schema.GroupVersionKind]*Informer
	indexes   map[schema.GroupVersionKind]map[string]client.IndexerFunc // IndexField, applied by Indexed
	owned     map[schema.GroupVersionKind]bool
}

var _ cache.Cache = (*Cache)(nil)

// NewCache returns a Cache reading through r; scheme resolves objects' kinds.
func NewCache(r client.Reader, scheme *runtime.Scheme) *Cache {
	return &Cache{Reader: r, scheme: scheme, informers: map[schema.GroupVersionKind]*Informer{}, owned: map[schema.GroupVersionKind]bool{},
		indexes: map[schema.GroupVersionKind]map[string]client.IndexerFunc{}}
}

// Fork returns a Cache for one more controller: informer shims of its own,
// so that each controller's handlers see the events of its own sources
// only, and c's reader and field indexes.
func (c *Cache) Fork() *Cache {
	f := NewCache(c.Reader, c.scheme)
	f.root = c
	if c.root != nil {
		f.root = c.root
	}
	return f
}

// GetInformer returns the kind's Informer shim, creating it.
func (c *Cache) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return nil, err
	}
	return c.informer(gvk, obj), nil
}

// GetInformerForKind is GetInformer by kind.
func (c *Cache) GetInformerForKind(_ context.Context, gvk schema.GroupVersionKind, _ ...cache.InformerGetOption) (cache.Informer, error) {
	obj, err := c.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	co, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s is not a Kubernetes object (no metadata)", gvk)
	}
	return c.informer(gvk, co), nil
}

func (c *Cache) informer(gvk schema.GroupVersionKind, obj client.Object) *Informer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.informers[gvk]; ok {
		return i
	}
	i := &Informer{hasSynced: synced, gvk: gvk, prototype: obj}
	c.informers[gvk] = i
	return i
}

// OwnedView returns the cache as the builder's Owns source sees it: the
// kinds it asks informers for are marked owned (see Owned).
func (c *Cache) OwnedView() cache.Cache { return ownedView{c} }

type ownedView struct{ *Cache }

func (v ownedView) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := v.Cache.GetInformer(ctx, obj, opts...)
	if err == nil {
		v.mu.Lock()
		v.owned[i.(*Informer).gvk] = true
		v.mu.Unlock()
	}
	return i, err
}

// Owned reports whether the kind was asked for through OwnedView.
func (c *Cache) Owned(gvk schema.GroupVersionKind) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[gvk]
}

// Informers returns the shims created so far, sorted by kind.
func (c *Cache) Informers() []*Informer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Informer, 0, len(c.informers))
	for _, i := range c.informers {
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].gvk.String() < out[b].gvk.String() })
	return out
}

// Lookup returns the kind's shim, if any source asked for it.
func (c *Cache) Lookup(gvk schema.GroupVersionKind) (*Informer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.informers[gvk]
	return i, ok
}

// RemoveInformer drops the kind's shim.
func (c *Cache) RemoveInformer(_ context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.informers, gvk)
	return nil
}

// Start blocks until ctx ends: there is nothing to run.
func (c *Cache) Start(ctx context.Context) error { <-ctx.Done(); return nil }

// WaitForCacheSync reports synced: there is no store to fill.
func (c *Cache) WaitForCacheSync(context.Context) bool { return true }

// Informer is the shim of one kind: it holds the registered handlers and
// is always synced.
type Informer struct {
	gvk       schema.GroupVersionKind
	prototype client.Object

	hasSynced // always synced: HasSynced, HasSyncedChecker

	mu       sync.Mutex
	handlers []*registration
}

var _ cache.Informer = (*Informer)(nil)

// GVK is the informer's kind.
func (i *Informer) GVK() schema.GroupVersionKind { return i.gvk }

// Prototype is the object type the first source asked for.
func (i *Informer) Prototype() client.Object { return i.prototype }

type registration struct {
	hasSynced
	h toolscache.ResourceEventHandler
}

// hasSynced is what the Informer shim and its registrations embed for
// their "synced" methods: HasSynced, and HasSyncedChecker with client-go
// v0.36 and later, which this file cannot declare (client-go v0.33 has no
// toolscache.DoneChecker). Its one value, synced, is a client-go FIFO that
// an empty Replace has synced, used for nothing else.
type hasSynced = toolscache.ResourceEventHandlerRegistration

var synced hasSynced = func() *toolscache.FIFO {
	f := toolscache.NewFIFO(toolscache.MetaNamespaceKeyFunc)
	_ = f.Replace(nil, "")
	return f
}()

// AddEventHandler records h.
func (i *Informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r := &registration{hasSynced: synced, h: h}
	i.handlers = append(i.handlers, r)
	return r, nil
}

// AddEventHandlerWithResyncPeriod records h; there is no resync.
func (i *Informer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandler(h)
}

// AddEventHandlerWithOptions records h.
func (i *Informer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandler(h)
}

// RemoveEventHandler forgets a registration.
func (i *Informer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for n, r := range i.handlers {
		if r == handle {
			i.handlers = append(i.handlers[:n:n], i.handlers[n+1:]...)
			break
		}
	}
	return nil
}

// Handlers returns the registered handlers.
func (i *Informer) Handlers() []toolscache.ResourceEventHandler {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make([]toolscache.ResourceEventHandler, len(i.handlers))
	for n, r := range i.handlers {
		out[n] = r.h
	}
	return out
}

// AddIndexers refuses: there is no store.
func (i *Informer) AddIndexers(toolscache.Indexers) error {
	return fmt.Errorf("serverless: %s has no informer store to index (reads go to the API server)", i.gvk.Kind)
}

// IsStopped is always false.
func (*Informer) IsStopped() bool { return false }
