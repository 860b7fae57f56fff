package hub

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/opzero/opzero/internal/resourceversion"
)

// refFilter keeps objects that some referrer names.
type refFilter struct {
	gvk   schema.GroupVersionKind
	key   indexKey
	index atomic.Pointer[refIndex] // set by wire before the watch sees the attachment
}

// indexKey is one index of referrers: a resource in a namespace ("" all)
// and the field naming the referenced object.
type indexKey struct {
	gvr   schema.GroupVersionResource
	ns    string
	field string
}

// refIndex follows the referrers and counts, per namespace/name, how many
// name it. It follows them through the shared watch of the same objects
// when the hub has one (tap: a Resource-mode Subscription of the referrer
// kind, the common case: the operator's own primary kind), else through a
// watch of its own.
type refIndex struct {
	h      *Hub
	key    indexKey
	tap    *sharedWatch // nil: its own watch
	cancel context.CancelFunc
	synced chan struct{}
	once   sync.Once
	resync chan struct{} // tapped: the shared watch may have missed or replayed changes

	mu      sync.Mutex
	by      map[string]string // referrer namespace/name -> referenced namespace/name
	count   map[string]int
	listRV  string     // tapped: changes up to it are in the last list
	pending []referrer // tapped: changes that arrived during a list
	listing bool

	// users are the attachments filtered by this index (set by wire): a
	// name that becomes referenced is told to them (refAdded).
	users atomic.Pointer[[]*attachment]
}

// referrer is one change of a referrer as the index keeps it: the
// referrer's namespace/name, the namespace/name it references ("" none or
// deleted) and its resource version.
type referrer struct {
	key, ref, rv string
}

// referrerOf reads a watched referrer (Unstructured or rawObject).
func (ix *refIndex) referrerOf(obj runtime.Object, deleted bool) (referrer, bool) {
	var m metav1.Object
	var name string
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		m = o
		name, _, _ = unstructured.NestedString(o.Object, strings.Split(ix.key.field, ".")...)
	case *rawObject:
		m = o
		if !deleted {
			name = o.field(ix.key.field)
		}
	default:
		return referrer{}, false
	}
	c := referrer{key: m.GetNamespace() + "/" + m.GetName(), rv: m.GetResourceVersion()}
	if !deleted && name != "" {
		c.ref = m.GetNamespace() + "/" + name
	}
	return c, true
}

// newIndex makes an index, not yet started: attachments can point to it
// before any watch sees them.
func (h *Hub) newIndex(k indexKey, tap *sharedWatch) *refIndex {
	return &refIndex{h: h, key: k, tap: tap, synced: make(chan struct{}), resync: make(chan struct{}, 1),
		by: map[string]string{}, count: map[string]int{}}
}

func (ix *refIndex) start(ctx context.Context) {
	ctx, ix.cancel = context.WithCancel(ctx)
	if ix.tap != nil {
		ix.tap.addTap(ix)
		go ix.runTapped(ctx)
		return
	}
	go ix.run(ctx)
}

func (ix *refIndex) stop() {
	if ix.tap != nil {
		ix.tap.removeTap(ix)
	}
	ix.cancel()
}

// has reports whether some referrer names ref; it waits for the first list
// of the referrers.
func (ix *refIndex) has(ctx context.Context, ref string) bool {
	select {
	case <-ix.synced:
	case <-ctx.Done():
		return true
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.count[ref] > 0
}

func (ix *refIndex) set(c referrer) (added string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.setLocked(c)
}

// setLocked applies c; added is the name c made referenced (none named
// it before), if any.
func (ix *refIndex) setLocked(c referrer) (added string) {
	old, had := ix.by[c.key]
	if had && old == c.ref {
		return ""
	}
	if had {
		if ix.count[old]--; ix.count[old] <= 0 {
			delete(ix.count, old)
		}
		delete(ix.by, c.key)
	}
	if c.ref == "" {
		return ""
	}
	ix.by[c.key] = c.ref
	if ix.count[c.ref]++; ix.count[c.ref] == 1 {
		return c.ref
	}
	return ""
}

// tapped is a change the shared watch saw: applied if newer than the last
// list, held while a list is under way. added: as setLocked (not for a
// change held: a list starts the index over, and the operators are told
// to drop what they cache: epoch.go).
func (ix *refIndex) tapped(c referrer) (added string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.listing {
		ix.pending = append(ix.pending, c)
		return ""
	}
	if newer(c.rv, ix.listRV) {
		return ix.setLocked(c)
	}
	return ""
}

// refAdded is a name an index's change made referenced, and the
// attachments to tell (refIndex.usersOf).
type refAdded struct {
	ref   string // namespace/name
	users []*attachment
}

// usersOf are the attachments filtered by the index whose namespace holds
// ref (namespace/name).
func (ix *refIndex) usersOf(ref string) []*attachment {
	users := ix.users.Load()
	if users == nil {
		return nil
	}
	ns, _, _ := strings.Cut(ref, "/")
	var out []*attachment
	for _, a := range *users {
		if a.key.ns == "" || a.key.ns == ns {
			out = append(out, a)
		}
	}
	return out
}

// tell sends each of r.users a Reference-mode update of the object that
// became referenced, each tied to holds (done once it is settled). Its
// changes while nobody referenced it were not sent (the referencedBy
// filter), so an operator may hold an older copy of it (the event cache,
// or a read while it was referenced before): the update has it dropped,
// and its referrers reconciled, with what the API server has now. Its
// changes from this one on are all sent.
func (h *Hub) tell(r refAdded, holds []*mark) {
	ns, name, _ := strings.Cut(r.ref, "/")
	for _, a := range r.users {
		h.stats.referenced.Inc()
		a.sub.disp.enqueueRef(a, ns, name, holds)
	}
}

// newer reports whether rv is after since ("" since: everything is).
func newer(rv, since string) bool {
	if since == "" {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(rv, since)
	return err != nil || c > 0
}

// runTapped lists the referrers (again whenever the shared watch may have
// missed or replayed changes), holding what the watch sees meanwhile, and
// applies what is newer than the list.
func (ix *refIndex) runTapped(ctx context.Context) {
	log := ix.h.opts.Log.WithValues("index", ix.key.gvr.GroupResource().String()+" "+ix.key.field)
	// List only once the watch knows the version it starts from: a list
	// before it would miss the changes between the list and that version.
	select {
	case <-ix.tap.positioned:
	case <-ctx.Done():
		return
	}
	for ctx.Err() == nil {
		ix.mu.Lock()
		ix.listing, ix.pending = true, nil
		ix.h.epoch.bump() // names referenced meanwhile are not told (EpochHeader)
		ix.mu.Unlock()
		by, count, rv, err := ix.list(ctx)
		ix.mu.Lock()
		if err == nil {
			ix.by, ix.count, ix.listRV = by, count, rv
			for _, c := range ix.pending {
				if newer(c.rv, rv) {
					ix.setLocked(c)
				}
			}
		}
		ix.listing, ix.pending = false, nil
		ix.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				log.Error(err, "listing the referrers failed; listing them again in 1s")
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		ix.once.Do(func() { close(ix.synced) })
		select {
		case <-ctx.Done():
		case <-ix.resync:
		}
	}
}

func (ix *refIndex) run(ctx context.Context) {
	log := ix.h.opts.Log.WithValues("index", ix.key.gvr.GroupResource().String()+" "+ix.key.field)
	r := ix.h.dyn.Resource(ix.key.gvr).Namespace(ix.key.ns)
	for ctx.Err() == nil {
		ix.h.epoch.bump() // names referenced meanwhile are not told (EpochHeader)
		by, count, rv, err := ix.list(ctx)
		if err == nil {
			ix.mu.Lock()
			ix.by, ix.count = by, count
			ix.mu.Unlock()
			ix.once.Do(func() { close(ix.synced) })
			var wi watch.Interface
			wi, err = r.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err == nil {
				err = ix.follow(ctx, wi)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Error(err, "following the referrers failed; listing them again in 1s")
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// list reads every referrer (paged) into a fresh index, and the list's
// resource version.
func (ix *refIndex) list(ctx context.Context) (map[string]string, map[string]int, string, error) {
	by, count := map[string]string{}, map[string]int{}
	cont := ""
	for {
		l, err := ix.h.dyn.Resource(ix.key.gvr).Namespace(ix.key.ns).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return nil, nil, "", err
		}
		for i := range l.Items {
			if c, _ := ix.referrerOf(&l.Items[i], false); c.ref != "" {
				by[c.key] = c.ref
				count[c.ref]++
			}
		}
		if cont = l.GetContinue(); cont == "" {
			return by, count, l.GetResourceVersion(), nil
		}
	}
}

func (ix *refIndex) follow(ctx context.Context, wi watch.Interface) error {
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			case watch.Added, watch.Modified, watch.Deleted:
				if c, ok := ix.referrerOf(ev.Object, ev.Type == watch.Deleted); ok {
					if added := ix.set(c); added != "" {
						ix.h.tell(refAdded{added, ix.usersOf(added)}, nil) // its own watch: no progress to hold
					}
				}
			}
		}
	}
}
