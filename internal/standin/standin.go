// Package standin is what one reconcile carries in its context, in both
// engines: the key and kind being reconciled, the event's object that stands
// in for the reconcile's first Get of its key (serverless, Resource mode),
// the generation the reconciler read (which automatic observedGeneration
// writes back), and the Versions the reconciler's client reports its reads
// and writes to (serverless), so that a stand-in is never older than what
// this instance has read or written.
package standin

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// State is what one reconcile of a key carries in its context.
type State struct {
	gvk      schema.GroupVersionKind
	key      client.ObjectKey
	versions *Versions // nil: nothing is tracked (classic mode)
	cache    *Cache    // nil: no event cache (Cache)

	mu         sync.Mutex
	standin    []byte // consumed by the first Get of key
	generation int64  // of the primary object as last read
	memory     bool   // a Get was answered from the stand-in or the Cache
}

type stateKey struct{}

// New returns the state of one reconcile of key (of kind gvk). standin, if
// not nil, answers the first Get of key; versions, if not nil, learns every
// version of an object of kind gvk the client reads or writes.
func New(gvk schema.GroupVersionKind, key client.ObjectKey, standin []byte, versions *Versions) *State {
	return &State{gvk: gvk, key: key, standin: standin, versions: versions}
}

// WithCache has the reconcile's Gets of objects of the kinds c holds
// answered from c where its rules allow, and its reads and writes of them
// recorded in c. It returns s.
func (s *State) WithCache(c *Cache) *State {
	s.cache = c
	return s
}

// With returns ctx carrying s.
func With(ctx context.Context, s *State) context.Context {
	return context.WithValue(ctx, stateKey{}, s)
}

// From returns the state ctx carries, or nil.
func From(ctx context.Context) *State {
	s, _ := ctx.Value(stateKey{}).(*State)
	return s
}

func (s *State) take() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.standin
	s.standin = nil
	return b
}

// FromMemory reports whether a Get of this reconcile was answered from the
// event's object or the Cache instead of the API server: a write conflict
// (409) may then come from that object being older than the API server's,
// which a GET would have read.
func (s *State) FromMemory() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memory
}

func (s *State) answeredFromMemory() {
	s.mu.Lock()
	s.memory = true
	s.mu.Unlock()
}

func (s *State) sawGeneration(g int64) {
	s.mu.Lock()
	s.generation = g
	s.mu.Unlock()
}

// Generation is the generation of the primary object as the reconcile last
// read it (0 if never).
func (s *State) Generation() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// Client is the client reconcilers get in both modes. Inside a reconcile
// (a State in the context) it answers the first Get of the reconciled key
// from the stand-in, if any, records the generation of the reconciled object
// whenever it is read, and reports every version of an object of the
// primary kind it reads or writes to the State's Versions. Outside a
// reconcile it is the client it wraps.
type Client struct {
	client.Client
}

var _ client.Client = Client{}

// NewClient wraps c.
func NewClient(c client.Client) Client { return Client{Client: c} }

// Get answers the reconcile's first Get of its own key from the event's
// object when there is one, and goes to the API server otherwise.
func (c Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s, gvk := c.cached(ctx, obj); s != nil {
		if raw := s.cache.Get(gvk, key); raw != nil && len(opts) == 0 && DecodeInto(raw, obj) == nil {
			s.answeredFromMemory()
			return nil
		}
		token := s.cache.ReadStart(gvk)
		err := c.Client.Get(ctx, key, obj, opts...)
		switch {
		case err == nil:
			s.cache.Observed(gvk, key, obj.GetResourceVersion())
			if len(opts) == 0 {
				s.cache.Read(gvk, token, obj)
			}
		case apierrors.IsNotFound(err):
			s.cache.Observed(gvk, key, "")
		}
		return err
	}
	s := c.primary(ctx, obj)
	if s == nil {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	if key == s.key {
		// Current again: a deletion may have been seen since the stand-in was chosen.
		if raw := s.take(); raw != nil && len(opts) == 0 && DecodeInto(raw, obj) == nil && s.versions.Current(key, obj.GetResourceVersion()) {
			s.sawGeneration(obj.GetGeneration())
			s.answeredFromMemory()
			return nil
		}
	}
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			s.versions.Gone(key)
		}
		return err
	}
	if key == s.key {
		s.sawGeneration(obj.GetGeneration())
	}
	s.versions.Observed(key, obj.GetResourceVersion())
	return nil
}

// Create creates obj and records its version.
func (c Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.observe(ctx, obj, c.Client.Create(ctx, obj, opts...))
}

// Update updates obj and records its new version.
func (c Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.observe(ctx, obj, c.Client.Update(ctx, obj, opts...))
}

// Patch patches obj and records its new version.
func (c Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.observe(ctx, obj, c.Client.Patch(ctx, obj, patch, opts...))
}

// Delete deletes obj; its versions are forgotten (an object being deleted
// with finalizers is read again by the next reconcile).
func (c Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	err := c.Client.Delete(ctx, obj, opts...)
	if s := c.primary(ctx, obj); s != nil {
		s.versions.Forget(client.ObjectKeyFromObject(obj))
	}
	if s, gvk := c.cached(ctx, obj); s != nil {
		s.cache.Observed(gvk, client.ObjectKeyFromObject(obj), "")
	}
	return err
}

// Status is the status subresource's writer, recording versions too.
func (c Client) Status() client.SubResourceWriter {
	return subWriter{SubResourceWriter: c.Client.Status(), c: c}
}

// SubResource is a subresource's client, recording versions of its writes.
func (c Client) SubResource(name string) client.SubResourceClient {
	sc := c.Client.SubResource(name)
	return subClient{SubResourceReader: sc, subWriter: subWriter{SubResourceWriter: sc, c: c}}
}

// primary returns the reconcile's state if obj is of the reconciled kind
// and this instance tracks versions, nil otherwise.
func (c Client) primary(ctx context.Context, obj client.Object) *State {
	s := From(ctx)
	if s == nil {
		return nil
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil || gvk != s.gvk {
		return nil
	}
	return s
}

// cached returns the reconcile's state and obj's kind if the state has a
// Cache that holds that kind (never the primary kind), nil otherwise.
func (c Client) cached(ctx context.Context, obj client.Object) (*State, schema.GroupVersionKind) {
	s := From(ctx)
	if s == nil || s.cache == nil {
		return nil, schema.GroupVersionKind{}
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil || gvk == s.gvk || !s.cache.Holds(gvk) {
		return nil, schema.GroupVersionKind{}
	}
	return s, gvk
}

// observe records obj's version after a successful write, and that it is
// gone after a write that found it missing.
func (c Client) observe(ctx context.Context, obj client.Object, err error) error {
	if apierrors.IsNotFound(err) {
		if s := c.primary(ctx, obj); s != nil {
			s.versions.Gone(client.ObjectKeyFromObject(obj))
		}
		if s, gvk := c.cached(ctx, obj); s != nil {
			s.cache.Observed(gvk, client.ObjectKeyFromObject(obj), "")
		}
	}
	if err != nil {
		return err
	}
	if s := c.primary(ctx, obj); s != nil {
		s.versions.Observed(client.ObjectKeyFromObject(obj), obj.GetResourceVersion())
	}
	if s, gvk := c.cached(ctx, obj); s != nil {
		s.cache.Observed(gvk, client.ObjectKeyFromObject(obj), obj.GetResourceVersion())
	}
	return nil
}

// subWriter embeds the writer it wraps, so that a method controller-runtime
// adds to client.SubResourceWriter (Apply, v0.22) passes through unchanged
// with every supported version.
type subWriter struct {
	client.SubResourceWriter
	c Client
}

func (s subWriter) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.SubResourceWriter.Create(ctx, obj, sub, opts...) // writes sub, not obj
}

func (s subWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.observe(ctx, obj, s.SubResourceWriter.Update(ctx, obj, opts...))
}

func (s subWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.observe(ctx, obj, s.SubResourceWriter.Patch(ctx, obj, patch, opts...))
}

type subClient struct {
	client.SubResourceReader
	subWriter
}

// DecodeInto replaces obj's content with the JSON object raw.
func DecodeInto(raw []byte, obj client.Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.Object = nil
		return u.UnmarshalJSON(raw)
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return json.Unmarshal(raw, obj)
	}
	v.Elem().Set(reflect.Zero(v.Elem().Type()))
	return json.Unmarshal(raw, obj)
}

// WriteObservedGeneration records that generation g of the object at key
// was reconciled, with a merge patch of the status subresource, retried on
// conflict. Both engines call it after a successful reconcile, and both
// treat its failure as a failed reconcile (retried with backoff). g <= 0
// (the reconcile never read the object) and a deleted object are no-ops.
// ctx should be the reconcile's, so that the write's version is recorded.
func WriteObservedGeneration(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey, g int64) error {
	if g <= 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"observedGeneration": g}})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(key.Namespace)
		u.SetName(key.Name)
		return c.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Versions remembers, per object of the primary kind, the newest
// resourceVersion this instance knows of: from the events that arrived (in
// arrival order) and from what the reconciler's client read and wrote. An
// event's object may stand in for a reconcile's first Get only if it is that
// newest version (Current).
//
// resourceVersions are opaque: only equality is compared. Order comes from
// two facts instead. A watch delivers one object's versions in order, so an
// event whose version is unknown is newer than the events before it. And a
// read or a write through the client returns the object as it is now, so it
// is newer than every event that arrived before it; until an event carries
// that version, an event with an unknown version may be one the watch sent
// before the write (the sender delivers one event at a time, and late), so it
// is not trusted: the first Get goes to the API server, which tells.
//
// A deletion is the end of the order: once this instance has seen the object
// gone (a delete event, or a read or write that found it missing: Gone), no
// event's object of that key stands in until the client reads or writes the
// key again (a new object of that name). An event delivered after the
// deletion (a late delivery, a redelivery, another source's) can carry a copy
// from before it, finalizers and all, and its version is one this instance
// may never have seen, so the rule above alone would trust it.
//
// Safe for concurrent use. Memory is bounded: past maxKeys objects an
// arbitrary one is forgotten, which only costs it a GET.
type Versions struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]*known
	// graves are the keys marked gone, oldest first, with the mark's
	// number: past maxGone the oldest mark is dropped (if not renewed).
	graves []grave
	marks  uint64
}

type grave struct {
	key  types.NamespacedName
	mark uint64
}

// known is what this instance knows of one object's versions.
type known struct {
	newest string
	// unconfirmed: newest came from a read or write through the client and
	// no event has carried it yet.
	unconfirmed bool
	// older are versions known to be older than newest (a few, newest last):
	// an event that carries one again is a late redelivery.
	older []string
	// early are the unknown versions events carried while unconfirmed: if
	// the client then reads one of them, the watch had already delivered it.
	early []string
	// gone: this instance saw the object deleted, and the client has not
	// read or written the key since (Gone); mark numbers the sighting.
	gone bool
	mark uint64
}

const (
	maxKeys  = 100_000
	maxOlder = 4
	// maxGone bounds the deletions remembered: a warm instance of a busy
	// operator sees many, and a late event is late by the sender's retries
	// (minutes), not by thousands of deletions. A forgotten one costs at
	// worst one failed reconcile of a stale stand-in, retried from the API
	// server.
	maxGone = 10_000
)

// NewVersions returns an empty Versions.
func NewVersions() *Versions {
	return &Versions{keys: map[types.NamespacedName]*known{}}
}

// Event records that an event carrying version rv of key arrived.
func (v *Versions) Event(key types.NamespacedName, rv string) {
	if v == nil || rv == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k := v.get(key)
	switch {
	case k.gone:
		// from before the deletion, or of a new object of that name: the
		// first Get tells which; if it reads this version, the watch has
		// delivered it already
		k.addEarly(rv)
	case k.newest == "":
		k.newest = rv
	case rv == k.newest:
		k.unconfirmed, k.early = false, nil // the watch has caught up with this instance's write
	case slices.Contains(k.older, rv):
		// a late redelivery
	case k.unconfirmed:
		// perhaps older than what this instance read or wrote
		k.addEarly(rv)
	default:
		k.push(rv)
	}
}

// Observed records version rv of key as read or written through the client.
func (v *Versions) Observed(key types.NamespacedName, rv string) {
	if v == nil || rv == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k := v.get(key)
	if k.gone {
		*k = known{early: k.early} // a new object of that name
	}
	if rv == k.newest || slices.Contains(k.older, rv) {
		return
	}
	early := slices.Contains(k.early, rv)
	k.push(rv)
	k.unconfirmed, k.early = !early, nil
}

// Current reports whether an object of key at version rv is the newest this
// instance knows of (true when it knows nothing of key, false after Gone
// until the client reads or writes key).
func (v *Versions) Current(key types.NamespacedName, rv string) bool {
	if v == nil {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k, ok := v.keys[key]
	return !ok || !k.gone && (k.newest == "" || k.newest == rv)
}

// Gone records that key was seen deleted: a delete event arrived, or a read
// or write through the client found it missing.
func (v *Versions) Gone(key types.NamespacedName) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.marks++
	*v.get(key) = known{gone: true, mark: v.marks}
	v.graves = append(v.graves, grave{key, v.marks})
	if len(v.graves) > maxGone {
		old := v.graves[0]
		v.graves = v.graves[1:]
		if k, ok := v.keys[old.key]; ok && k.gone && k.mark == old.mark {
			delete(v.keys, old.key)
		}
	}
}

// Forget drops what is known of key: its state is unknown (a delete was
// asked for, which finalizers may hold; an event was refused unread).
func (v *Versions) Forget(key types.NamespacedName) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.keys, key)
}

func (v *Versions) get(key types.NamespacedName) *known {
	k, ok := v.keys[key]
	if !ok {
		if len(v.keys) >= maxKeys {
			for drop := range v.keys {
				delete(v.keys, drop)
				break
			}
		}
		k = &known{}
		v.keys[key] = k
	}
	return k
}

func (k *known) addEarly(rv string) {
	k.early = append(k.early, rv)
	if len(k.early) > maxOlder {
		k.early = k.early[1:]
	}
}

func (k *known) push(rv string) {
	if k.newest != "" {
		k.older = append(k.older, k.newest)
		if len(k.older) > maxOlder {
			k.older = k.older[1:]
		}
	}
	k.newest = rv
}
