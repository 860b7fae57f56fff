package standin

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

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
// Safe for concurrent use. Memory is bounded: past maxKeys objects an
// arbitrary one is forgotten, which only costs it a GET.
type Versions struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]*known
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
}

const (
	maxKeys  = 100_000
	maxOlder = 4
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
	case k.newest == "":
		k.newest = rv
	case rv == k.newest:
		k.unconfirmed, k.early = false, nil // the watch has caught up with this instance's write
	case slices.Contains(k.older, rv):
		// a late redelivery
	case k.unconfirmed:
		// perhaps older than what this instance read or wrote
		k.early = append(k.early, rv)
		if len(k.early) > maxOlder {
			k.early = k.early[1:]
		}
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
	if rv == k.newest || slices.Contains(k.older, rv) {
		return
	}
	early := slices.Contains(k.early, rv)
	k.push(rv)
	k.unconfirmed, k.early = !early, nil
}

// Current reports whether an object of key at version rv is the newest this
// instance knows of (true when it knows nothing of key).
func (v *Versions) Current(key types.NamespacedName, rv string) bool {
	if v == nil {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k, ok := v.keys[key]
	return !ok || k.newest == "" || k.newest == rv
}

// Forget drops key (it was deleted).
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

func (k *known) push(rv string) {
	if k.newest != "" {
		k.older = append(k.older, k.newest)
		if len(k.older) > maxOlder {
			k.older = k.older[1:]
		}
	}
	k.newest = rv
}
