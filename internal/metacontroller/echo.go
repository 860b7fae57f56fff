package metacontroller

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// echoes are the resourceVersions a successful sync left its object and
// children at (what it wrote, or read and left alone). An event of an
// object still at that version is the sync's own echo: it tells nothing
// the sync did not see, so it syncs nothing. Classic mode's workqueue
// folds most echoes into a sync already queued; serverless, each event is
// its own request, and without this each echo called the hooks again.
// A deletion, another writer's change or a related object's change is
// never an echo.
type echoes struct {
	mu sync.Mutex
	rv map[string]string // "<owner>|<group>/<kind>/<namespace>/<name>" -> resourceVersion
}

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
		e.rv = map[string]string{}
	}
	e.rv[echoKey(owner, gk, o.GetNamespace(), o.GetName())] = rv
}

// is reports whether o (of kind gk) is still where owner's last sync left it.
func (e *echoes) is(owner string, gk schema.GroupKind, o client.Object) bool {
	rv := o.GetResourceVersion()
	if rv == "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rv[echoKey(owner, gk, o.GetNamespace(), o.GetName())] == rv
}
