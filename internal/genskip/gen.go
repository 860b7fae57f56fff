// Package genskip (generation skip) holds the generation-aware skip rule both engines apply to
// updates of the primary kind: an update whose metadata.generation <=
// status.observedGeneration, that is not a deletion and changes none of the
// metadata the operator cares about (finalizers always; labels and
// annotations when opted in), needs no reconcile. It links no
// controller-runtime: the opzero hub applies the same rule before it sends.
package genskip

import (
	"hash/fnv"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Observed reports whether generation has already been reconciled.
func Observed(generation, observed int64, hasObserved, deleting bool) bool {
	return hasObserved && !deleting && generation > 0 && generation <= observed
}

// Fingerprint hashes the metadata whose change must trigger a reconcile even
// when the generation did not move.
func Fingerprint(o Options, finalizers []string, labels, annotations map[string]string) uint64 {
	h := fnv.New64a()
	write := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	f := append([]string(nil), finalizers...)
	sort.Strings(f)
	for _, s := range f {
		write(s)
	}
	writeMap := func(tag string, m map[string]string) {
		write(tag)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			write(k)
			write(m[k])
		}
	}
	if o.OnLabelChange {
		writeMap("\x01labels", labels)
	}
	if o.OnAnnotationChange {
		writeMap("\x01annotations", annotations)
	}
	return h.Sum64()
}

// Options says which metadata besides finalizers counts as a change
// (builder.SkipOptions' fields of the same names).
type Options struct {
	OnLabelChange, OnAnnotationChange bool
}

// FingerprintOf is Fingerprint of obj's metadata.
func FingerprintOf(o Options, obj metav1.Object) uint64 {
	return Fingerprint(o, obj.GetFinalizers(), obj.GetLabels(), obj.GetAnnotations())
}

// ObservedGeneration reads status.observedGeneration from any object.
func ObservedGeneration(obj runtime.Object) (int64, bool) {
	var m map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		m = u.Object
	} else {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return 0, false
		}
	}
	v, found, err := unstructured.NestedInt64(m, "status", "observedGeneration")
	return v, found && err == nil
}

// Memo remembers the last fingerprint seen per key, bounded: when full it
// forgets an arbitrary key, which only costs that key one extra reconcile.
type Memo[K comparable] struct {
	max int
	m   map[K]uint64
}

// NewMemo returns a Memo holding at most max keys.
func NewMemo[K comparable](max int) *Memo[K] { return &Memo[K]{max: max, m: make(map[K]uint64)} }

// Swap records fp for key and reports whether it equals the previous one.
// The caller serializes access.
func (m *Memo[K]) Swap(key K, fp uint64) (same bool) {
	prev, ok := m.m[key]
	if !ok && len(m.m) >= m.max {
		for k := range m.m {
			delete(m.m, k)
			break
		}
	}
	m.m[key] = fp
	return ok && prev == fp
}

// Forget drops key (the object was deleted).
func (m *Memo[K]) Forget(key K) { delete(m.m, key) }
