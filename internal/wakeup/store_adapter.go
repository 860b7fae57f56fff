package wakeup

import (
	"container/heap"
	"runtime/debug"

	"k8s.io/client-go/tools/cache"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// storeAdapter is the Source as a reflector's store: it keeps a small entry
// per record instead of the objects.
type storeAdapter Source

func (a *storeAdapter) Add(obj interface{}) error    { return a.Update(obj) }
func (a *storeAdapter) Resync() error                { return nil }
func (a *storeAdapter) Delete(obj interface{}) error { a.remove(keyOf(obj)); return nil }

func (a *storeAdapter) Update(obj interface{}) error {
	w, ok := obj.(*v1alpha1.Wakeup)
	if !ok {
		return nil
	}
	s := (*Source)(a)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := w.Namespace + "/" + w.Name
	e, ok := s.entries[k]
	if !ok {
		e = &entry{ns: w.Namespace, name: w.Name, index: -1}
		s.entries[k] = e
	}
	if e.rv == w.ResourceVersion {
		return nil
	}
	e.rv, e.due, e.sink = w.ResourceVersion, w.Spec.Due.Time, w.Spec.Sink
	e.target, e.operator, e.reason, e.failures = w.Spec.Target, w.Spec.Operator, w.Spec.Reason, 0
	if e.index >= 0 {
		heap.Fix(&s.due, e.index)
	} else {
		heap.Push(&s.due, e)
	}
	s.poke()
	return nil
}

func (a *storeAdapter) Replace(list []interface{}, _ string) error {
	keep := map[string]bool{}
	for _, obj := range list {
		keep[keyOf(obj)] = true
		_ = a.Update(obj)
	}
	s := (*Source)(a)
	s.health.synced() // after a list, or the initial events of a watch-list
	s.mu.Lock()
	var gone []string
	for k := range s.entries {
		if !keep[k] {
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	for _, k := range gone {
		a.remove(k)
	}
	// The initial list held every object at once; only small entries are
	// kept, so hand the transient memory back to the system.
	go debug.FreeOSMemory()
	return nil
}

func (a *storeAdapter) remove(k string) {
	s := (*Source)(a)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[k]; ok {
		if e.index >= 0 {
			heap.Remove(&s.due, e.index)
		}
		delete(s.entries, k)
	}
}

func keyOf(obj interface{}) string {
	switch w := obj.(type) {
	case *v1alpha1.Wakeup:
		return w.Namespace + "/" + w.Name
	case interface {
		GetNamespace() string
		GetName() string
	}:
		return w.GetNamespace() + "/" + w.GetName()
	}
	if d, ok := obj.(cacheDeleted); ok {
		return d.Key
	}
	return ""
}

// dueHeap orders entries by due time.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *dueHeap) Push(x any)        { e := x.(*entry); e.index = len(*h); *h = append(*h, e) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

type cacheDeleted = cache.DeletedFinalStateUnknown
