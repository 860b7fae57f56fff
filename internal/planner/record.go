package planner

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/plan"
)

// record is one planned reconcile: what it wrote, read and recorded.
type record struct {
	round int
	local *overlay

	mu      sync.Mutex
	obj     plan.Object
	written []written
	// read are the objects as the reconcile last read them (JSON), the
	// "before" of its writes: no second GET per write.
	read   map[okey][]byte
	closed bool // the reconcile timed out: what it does later is not recorded
}

// written is one write as the follow-on rounds need it.
type written struct {
	gvk           schema.GroupVersionKind
	key           client.ObjectKey
	verb          string
	sub           string
	before, after map[string]any
}

type recordKey struct{}

func withRecord(ctx context.Context, r *record) context.Context {
	return plan.WithPlanning(context.WithValue(ctx, recordKey{}, r), r)
}

func recordFrom(ctx context.Context) *record {
	r, _ := ctx.Value(recordKey{}).(*record)
	return r
}

// AskedPlanning is told by operator.Planning(ctx).
func (r *record) AskedPlanning() {
	r.mu.Lock()
	r.obj.Planning = true
	r.mu.Unlock()
}

// open reports whether r still records (its reconcile has not timed out).
func (r *record) open() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.closed
}

func (r *record) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

func (r *record) addWrite(w plan.Write, wr *written) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.obj.Writes = append(r.obj.Writes, w)
	if wr != nil {
		r.written = append(r.written, *wr)
	}
}

func (r *record) addEvent(e plan.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.obj.Events = append(r.obj.Events, e)
	}
}

func (r *record) inexact(why string) { r.note(&r.obj.Inexact, why) }

func (r *record) external(what string) { r.note(&r.obj.External, what) }

// note appends s to *list once.
func (r *record) note(list *[]string, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	for _, x := range *list {
		if x == s {
			return
		}
	}
	*list = append(*list, s)
}

func (r *record) sawRead(k okey, raw []byte) {
	r.mu.Lock()
	if r.read == nil {
		r.read = map[okey][]byte{}
	}
	r.read[k] = raw
	r.mu.Unlock()
}

func (r *record) lastRead(k okey) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.read[k]
	return b, ok
}

// result returns the planned object; r records nothing more.
func (r *record) result() (plan.Object, []written) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.obj, r.written
}
