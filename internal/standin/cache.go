package standin

import (
	"encoding/json"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cache holds the objects of an operator's owned and watched kinds as
// Resource-mode events delivered them, and as the reconcilers' Gets read
// them from the API server, so that a warm instance answers a reconciler's
// Get of one from memory instead of the API server.
//
// The rules (Get answers from the cache only if all hold; otherwise the
// API server answers, and what it returns is recorded):
//
//   - the object arrived in an event, or a Get read it and no event of its
//     kind arrived while that Get was under way (Read); and no event since
//     said it was deleted or changed without carrying it (Reference mode),
//     nor, for an object a Get read, carried a version other than the one
//     read (it may be older or newer: the API server tells);
//   - its version is the newest this instance knows of (Versions, as for
//     the first-Get stand-in): the reconciler's client has not read or
//     written a version that no event has carried back yet, and a late
//     redelivery of an older version never replaces it;
//   - it arrived (or was read) less than MaxAge ago (a backstop for an
//     event the sender lost: it has no relist);
//   - no event was refused unread since (Forget, which the engine calls
//     when it answers an event without decoding it: it may have been any
//     object's).
//
// Lists are never answered from the cache, nor Gets with options. So the
// cache is never older than what this instance read or wrote (an informer
// can be), and it sees another writer's change when that change's event
// is delivered: what an informer on the same watch would see, later by the
// sender's delivery queue.
//
// Caveat: an object whose changes the sources do not deliver (a kind
// watched with a label selector is never cached from reads; but an object
// of a watched kind that a referencedBy filter or an owner filter leaves
// out of the events) is served as read for up to MaxAge.
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
	// off: nothing is kept or served (Serve): another instance of the
	// operator may be reconciling, and the events it gets are not seen here.
	off bool
	// epoch is the event sender's epoch as last seen (Epoch).
	epoch string
}

type kindCache struct {
	versions *Versions
	objs     map[types.NamespacedName]cached
	// events counts the events of this kind (and Forgets): a Get's result
	// is kept only if none arrived while it was under way.
	events uint64
	reads  bool // KeepReads
}

type cached struct {
	raw  []byte
	rv   string
	at   time.Time
	read bool // from a Get, not from an event
}

// NewCache returns an empty cache of objects of kinds.
func NewCache(kinds ...schema.GroupVersionKind) *Cache {
	c := &Cache{MaxAge: time.Minute, MaxObjects: 10_000, now: time.Now, kinds: map[schema.GroupVersionKind]*kindCache{}}
	for _, k := range kinds {
		c.kinds[k] = &kindCache{versions: NewVersions(), objs: map[types.NamespacedName]cached{}}
	}
	return c
}

// KeepReads has the cache keep what Gets of objects of kinds read (Read),
// not only what events carried: for kinds whose every change reaches this
// instance as an event (no label selector on their source). Call it
// before the cache is used.
func (c *Cache) KeepReads(kinds ...schema.GroupVersionKind) {
	for _, k := range kinds {
		if kc := c.kinds[k]; kc != nil {
			kc.reads = true
		}
	}
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
	kc.events++
	if c.off {
		return
	}
	if raw == nil || rv == "" {
		kc.versions.Forget(key)
		c.drop(kc, key)
		return
	}
	kc.versions.Event(key, rv)
	switch have, ok := kc.objs[key]; {
	case kc.versions.Current(key, rv):
		c.put(kc, key, cached{raw: raw, rv: rv, at: c.now()})
	case ok && have.read:
		c.drop(kc, key) // older or newer than what was read: the API server tells
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
	kc.events++ // a Get under way may have read it before the deletion
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

// ReadStart is called before a Get of an object of kind gvk goes to the
// API server; Read takes what it returns.
func (c *Cache) ReadStart(gvk schema.GroupVersionKind) uint64 {
	kc := c.kind(gvk)
	if kc == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return kc.events
}

// Read keeps obj, which a Get that started at token (ReadStart) read from
// the API server, unless an event of its kind arrived meanwhile (which may
// have been obj's newer version, delivered before the Get answered) or
// obj is not the newest version this instance knows of. Observed must
// have recorded obj's version first.
func (c *Cache) Read(gvk schema.GroupVersionKind, token uint64, obj client.Object) {
	kc := c.kind(gvk)
	if kc == nil || !kc.reads {
		return
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return
	}
	key, rv := client.ObjectKeyFromObject(obj), obj.GetResourceVersion()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off || kc.events != token || rv == "" || !kc.versions.Current(key, rv) {
		return
	}
	c.put(kc, key, cached{raw: raw, rv: rv, at: c.now(), read: true})
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
	if c.off || !ok || c.now().Sub(o.at) >= c.MaxAge || !kc.versions.Current(key, o.rv) {
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
	c.forget()
}

// Serve turns the cache on or off, dropping what it holds either way: off
// while another instance of the operator may reconcile (the events it gets
// never reach this instance, so what is held here can be older than what
// it saw), on from the moment this instance knows it is the only one
// (every event from then on comes here; what was held before may predate
// one that did not).
func (c *Cache) Serve(on bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = !on
	c.forget()
}

// Epoch records the epoch of the sender of an event (the opzero hub's
// EpochHeader) before the event is decoded: when it differs from the one
// last seen, the sender may not have told of every change since (it
// started again, or listed what its watch missed), and everything is
// dropped.
func (c *Cache) Epoch(epoch string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch == c.epoch {
		return
	}
	c.epoch = epoch
	c.forget()
}

func (c *Cache) forget() {
	for _, kc := range c.kinds {
		kc.versions, kc.objs = NewVersions(), map[types.NamespacedName]cached{}
		kc.events++
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

func (c *Cache) put(kc *kindCache, key types.NamespacedName, o cached) {
	if _, ok := kc.objs[key]; !ok {
		c.makeRoom()
		c.n++
	}
	kc.objs[key] = o
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
