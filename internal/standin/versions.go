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
