package metacontroller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// echoes are the resourceVersions successful syncs left their object and
// children at (what they wrote, or read and left alone). An event of an
// object at such a version is a sync's own echo: it tells nothing
// the sync did not see, so it syncs nothing. Classic mode's workqueue
// folds most echoes into a sync already queued; serverless, each event is
// its own request, and without this each echo called the hooks again.
// A deletion, another writer's change or a related object's change is
// never an echo.
//
// An echo may arrive while the sync that caused it still runs (before it
// recorded the version): the map functions wait (settle) for the syncs of
// the object's parent to end before they compare.
type echoes struct {
	mu   sync.Mutex
	rv   map[string][]string // "<owner>|<group>/<kind>/<namespace>/<name>" -> the last resourceVersions (keepEchoes)
	busy map[string]*busy    // parent UID -> its syncs running now
}

type busy struct {
	n    int
	done chan struct{}
}

// begin marks a sync of the parent uid running; the func ends it.
func (e *echoes) begin(uid string) func() {
	if uid == "" {
		return func() {}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy == nil {
		e.busy = map[string]*busy{}
	}
	b := e.busy[uid]
	if b == nil {
		b = &busy{done: make(chan struct{})}
		e.busy[uid] = b
	}
	b.n++
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if b.n--; b.n == 0 {
			close(b.done)
			delete(e.busy, uid)
		}
	}
}

// settle waits until no sync of the parent uid runs (at most settleWait).
func (e *echoes) settle(ctx context.Context, uid string) {
	e.mu.Lock()
	b := e.busy[uid]
	e.mu.Unlock()
	if b == nil {
		return
	}
	select {
	case <-b.done:
	case <-ctx.Done():
	case <-time.After(settleWait):
	}
}

// settleWait bounds settle: a sync longer than that (a slow hook) leaves
// the event to be compared with what the previous sync left.
const settleWait = 30 * time.Second

func echoKey(owner string, gk schema.GroupKind, ns, name string) string {
	return owner + "|" + gk.String() + "/" + ns + "/" + name
}

// left records that o is at its resourceVersion after a sync of owner's.
func (e *echoes) left(owner string, o client.Object) {
	rv := o.GetResourceVersion()
	if rv == "" {
		return
	}
	gk := o.GetObjectKind().GroupVersionKind().GroupKind()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rv == nil {
		e.rv = map[string][]string{}
	}
	k := echoKey(owner, gk, o.GetNamespace(), o.GetName())
	h := e.rv[k]
	if len(h) > 0 && h[len(h)-1] == rv {
		return
	}
	if len(h) == keepEchoes {
		h = h[1:]
	}
	e.rv[k] = append(h, rv)
}

// keepEchoes is how many versions of one object are kept: classic mode
// maps an update's old object too, which is the version an earlier sync
// left.
const keepEchoes = 4

// is reports whether o (of kind gk) is still where owner's last sync left it.
func (e *echoes) is(owner string, gk schema.GroupKind, o client.Object) bool {
	rv := o.GetResourceVersion()
	if rv == "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, v := range e.rv[echoKey(owner, gk, o.GetNamespace(), o.GetName())] {
		if v == rv {
			return true
		}
	}
	return false
}
