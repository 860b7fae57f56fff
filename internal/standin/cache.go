package standin

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Cache holds the objects of an operator's owned and watched kinds as
// Resource-mode events delivered them, so that a warm instance answers a
// reconciler's Get of one from memory instead of the API server.
//
// The rules (Get answers from the cache only if all hold; otherwise the
// API server answers, and what it returns is recorded):
//
//   - the object arrived in an event, and no event since said it was
//     deleted or changed without carrying it (Reference mode);
//   - its version is the newest this instance knows of (Versions, as for
//     the first-Get stand-in): the reconciler's client has not read or
//     written a version that no event has carried back yet, and a late
//     redelivery of an older version never replaces it;
//   - it arrived less than MaxAge ago (a backstop for an event the sender
//     lost: it has no relist);
//   - no event was refused unread since (Forget, which the engine calls
//     when it answers an event without decoding it: it may have been any
//     object's).
//
// Lists are never answered from the cache, nor objects not seen in an
// event, nor Gets with options. So the cache is never older than what this
// instance read or wrote (an informer can be), and it sees another
// writer's change when that change's event is delivered: what an informer
// on the same watch would see, later by the sender's delivery queue.
//
// Safe for concurrent use; memory is bounded by MaxObjects.
type Cache struct {
	// MaxAge bounds how long an event's object is served (1 min).
	MaxAge time.Duration
	// MaxObjects bounds the objects held (10000): past it an arbitrary one
	// is dropped, which only costs it a GET.
	MaxObjects int
	now        func() time.Time

	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]*kindCache
	n     int
}

type kindCache struct {
	versions *Versions
	objs     map[types.NamespacedName]cached
}

type cached struct {
	raw []byte
	rv  string
	at  time.Time
}

// NewCache returns an empty cache of objects of kinds.
func NewCache(kinds ...schema.GroupVersionKind) *Cache {
	c := &Cache{MaxAge: time.Minute, MaxObjects: 10_000, now: time.Now, kinds: map[schema.GroupVersionKind]*kindCache{}}
	for _, k := range kinds {
		c.kinds[k] = &kindCache{versions: NewVersions(), objs: map[types.NamespacedName]cached{}}
	}
	return c
}

// Holds reports whether objects of kind gvk are cached.
func (c *Cache) Holds(gvk schema.GroupVersionKind) bool {
	if c == nil {
		return false
	}
	_, ok := c.kinds[gvk] // kinds is fixed after NewCache
	return ok
}

// Event records an event for the object key of kind gvk: raw is the object
// at version rv (Resource mode); nil raw means the event did not carry it
// (Reference mode) or it was deleted: what is held of it is dropped.
func (c *Cache) Event(gvk schema.GroupVersionKind, key types.NamespacedName, rv string, raw []byte) {
	kc := c.kind(gvk)
	if kc == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if raw == nil || rv == "" {
		kc.versions.Forget(key)
		c.drop(kc, key)
		return
	}
	kc.versions.Event(key, rv)
	switch have, ok := kc.objs[key]; {
	case kc.versions.Current(key, rv):
		if !ok {
			c.makeRoom()
			c.n++
		}
		kc.objs[key] = cached{raw: raw, rv: rv, at: c.now()}
	case ok && kc.versions.Current(key, have.rv):
		// a late redelivery of an older version: keep the newer
	default:
		c.drop(kc, key) // cannot tell which is newer: the API server tells
	}
}

// Gone records that an event said the object key of kind gvk was deleted:
// what is held of it is dropped, and no event's object of key is served
// until the client reads or writes key (Versions.Gone).
func (c *Cache) Gone(gvk schema.GroupVersionKind, key types.NamespacedName) {
	kc := c.kind(gvk)
	if kc == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kc.versions.Gone(key)
	c.drop(kc, key)
}

// Observed records version rv of key as read or written through the
// client; rv "" (not found, deleted) drops what is held of key and counts
// as Gone.
func (c *Cache) Observed(gvk schema.GroupVersionKind, key types.NamespacedName, rv string) {
	kc := c.kind(gvk)
	if kc == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv == "" {
		kc.versions.Gone(key)
		c.drop(kc, key)
		return
	}
	kc.versions.Observed(key, rv)
}

// Get returns the object key of kind gvk if the rules allow serving it
// from memory, else nil.
func (c *Cache) Get(gvk schema.GroupVersionKind, key types.NamespacedName) []byte {
	kc := c.kind(gvk)
	if kc == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := kc.objs[key]
	if !ok || c.now().Sub(o.at) >= c.MaxAge || !kc.versions.Current(key, o.rv) {
		return nil
	}
	return o.raw
}

// Forget drops everything: an event may have been lost.
func (c *Cache) Forget() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, kc := range c.kinds {
		kc.versions, kc.objs = NewVersions(), map[types.NamespacedName]cached{}
	}
	c.n = 0
}

// Len is the number of objects held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *Cache) kind(gvk schema.GroupVersionKind) *kindCache {
	if c == nil {
		return nil
	}
	return c.kinds[gvk] // fixed after NewCache; its fields change under mu
}

func (c *Cache) drop(kc *kindCache, key types.NamespacedName) {
	if _, ok := kc.objs[key]; ok {
		delete(kc.objs, key)
		c.n--
	}
}

// makeRoom drops an arbitrary object when MaxObjects are held.
func (c *Cache) makeRoom() {
	if c.n < c.MaxObjects {
		return
	}
	for _, kc := range c.kinds {
		for key := range kc.objs {
			c.drop(kc, key)
			return
		}
	}
}
