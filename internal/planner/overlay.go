package planner

import (
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// okey names an object across versions of its kind.
type okey struct {
	group, kind, namespace, name string
}

func keyOf(gvk schema.GroupVersionKind, key client.ObjectKey) okey {
	return okey{group: gvk.Group, kind: gvk.Kind, namespace: key.Namespace, name: key.Name}
}

func (k okey) less(o okey) bool {
	if k.group != o.group {
		return k.group < o.group
	}
	if k.kind != o.kind {
		return k.kind < o.kind
	}
	if k.namespace != o.namespace {
		return k.namespace < o.namespace
	}
	return k.name < o.name
}

// entry is an object as the plan would leave it: the API server's
// dry-run answer (JSON), or deleted.
type entry struct {
	raw     []byte
	deleted bool
	// created: the object exists only in the plan (a dry-run create).
	created bool
	round   int
	// server is the object as the API server has it (JSON), as the
	// plan's first write of it found it: a later write, dry-run against
	// it, is composed with raw (compose.go). nil when unknown.
	server []byte
}

// overlay holds what a plan would have written. A reconcile's own
// writes are in its record's overlay (read back at once, as the API
// server would answer them); at the end of a round they are committed to
// the plan's, which later rounds and map functions read: the reads of
// round N+1 see round N's writes, never those of a reconcile of the same
// round (the order of one round's reconciles is not the operator's).
type overlay struct {
	mu sync.RWMutex
	m  map[okey]entry
}

func newOverlay() *overlay { return &overlay{m: map[okey]entry{}} }

func (o *overlay) get(k okey) (entry, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	e, ok := o.m[k]
	return e, ok
}

func (o *overlay) put(k okey, e entry) {
	o.mu.Lock()
	o.m[k] = e
	o.mu.Unlock()
}

// kind returns the entries of one kind, sorted by key.
func (o *overlay) kind(group, kind string) []keyed {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var out []keyed
	for k, e := range o.m {
		if k.group == group && k.kind == kind {
			out = append(out, keyed{k, e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k.less(out[j].k) })
	return out
}

// commit copies from's entries into o; an object created earlier in the
// plan stays created.
func (o *overlay) commit(from *overlay) {
	from.mu.RLock()
	defer from.mu.RUnlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, e := range from.m {
		if prev, ok := o.m[k]; ok && prev.created {
			e.created = true
		}
		o.m[k] = e
	}
}

type keyed struct {
	k okey
	e entry
}
