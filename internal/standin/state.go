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
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// State is what one reconcile of a key carries in its context.
type State struct {
	gvk      schema.GroupVersionKind
	key      client.ObjectKey
	versions *Versions // nil: nothing is tracked (classic mode)

	mu         sync.Mutex
	standin    []byte // consumed by the first Get of key
	generation int64  // of the primary object as last read
}

type stateKey struct{}

// New returns the state of one reconcile of key (of kind gvk). standin, if
// not nil, answers the first Get of key; versions, if not nil, learns every
// version of an object of kind gvk the client reads or writes.
func New(gvk schema.GroupVersionKind, key client.ObjectKey, standin []byte, versions *Versions) *State {
	return &State{gvk: gvk, key: key, standin: standin, versions: versions}
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
