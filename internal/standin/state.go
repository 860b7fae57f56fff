package standin

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	gone       bool   // the last Get of key found no object
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

func (s *State) sawGone(gone bool) {
	s.mu.Lock()
	s.gone = gone
	s.mu.Unlock()
}

// Gone reports whether the reconcile's last Get of its own key from the
// API server found no object.
func (s *State) Gone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// Generation is the generation of the primary object as the reconcile last
// read it (0 if never).
func (s *State) Generation() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}
