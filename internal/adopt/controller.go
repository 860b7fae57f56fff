package adopt

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// EventType is what happened to the object of a delivered event.
type EventType string

// The event types Deliver takes (builder.EventType's values).
const (
	Added   EventType = "add"
	Updated EventType = "update"
	Deleted EventType = "delete"
)

// maxSeen bounds the previous objects kept for updates' old side.
const maxSeen = 50_000

// Controller is one adopted controller-runtime controller.
type Controller struct {
	ctrl  controller.Controller
	raw   []RawSource          // RawSources
	do    reconcile.Reconciler // the user's reconciler (the controller's Do)
	name  string
	log   func(*reconcile.Request) logr.Logger
	queue *captureQueue
	cache *Cache

	// deliverMu makes Deliver one event at a time: the capture queue
	// attributes adds to the event being delivered.
	deliverMu sync.Mutex
	seen      map[seenKey]client.Object // guarded by deliverMu
}

type seenKey struct {
	gvk schema.GroupVersionKind
	key types.NamespacedName
}

type newQueueFunc = func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request]

// Adopt recognises r as a controller built by controller-runtime (as
// controller.New and the builder make them). ok is false when r is not a
// controller (another Runnable); err is set when it is one whose shape this
// opzero does not know. fallback receives requests added outside Deliver.
// Adopt replaces the controller's queue: call it before the controller starts.
func Adopt(r any, c *Cache, fallback func(reconcile.Request, time.Duration)) (_ *Controller, ok bool, _ error) {
	ctrl, isCtrl := r.(controller.Controller)
	if !isCtrl {
		return nil, false, nil
	}
	if err := CheckControllerRuntime(linked()); err != nil {
		return nil, true, fmt.Errorf("cannot run controller %T serverless: %w", r, err)
	}
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, true, shapeError(r, "not a pointer to a struct")
	}
	s := v.Elem()
	nq := s.FieldByName("NewQueue")
	if !nq.IsValid() || !nq.CanSet() || nq.Type() != reflect.TypeFor[newQueueFunc]() {
		return nil, true, shapeError(r, "no settable field NewQueue "+reflect.TypeFor[newQueueFunc]().String())
	}
	name := s.FieldByName("Name")
	if !name.IsValid() || name.Kind() != reflect.String {
		return nil, true, shapeError(r, "no field Name string")
	}
	lc := s.FieldByName("LogConstructor")
	if !lc.IsValid() || lc.Type() != reflect.TypeFor[func(*reconcile.Request) logr.Logger]() {
		return nil, true, shapeError(r, "no field LogConstructor func(*reconcile.Request) logr.Logger")
	}
	a := &Controller{ctrl: ctrl, name: name.String(), cache: c, queue: newCaptureQueue(fallback), seen: map[seenKey]client.Object{}}
	a.log, _ = lc.Interface().(func(*reconcile.Request) logr.Logger)
	if do := s.FieldByName("Do"); do.IsValid() && do.CanInterface() {
		a.do, _ = do.Interface().(reconcile.Reconciler)
	}
	if a.log == nil {
		a.log = func(*reconcile.Request) logr.Logger { return ctrl.GetLogger() }
	}
	q := a.queue
	nq.Set(reflect.ValueOf(newQueueFunc(func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return q
	})))
	return a, true, nil
}

func shapeError(r any, what string) error {
	v := LinkedControllerRuntime()
	if v == "" {
		v = "of an unknown version"
	}
	return fmt.Errorf("cannot run controller %T serverless: %s; this opzero adopts the controllers of sigs.k8s.io/controller-runtime %s to %s "+
		"and this binary links controller-runtime %s: require one of those in go.mod, or run --mode=classic", r, what, OldestControllerRuntime, NewestControllerRuntime, v)
}

// Do is the user's reconciler (the controller's Do field), for describing
// it: its package holds the +kubebuilder:rbac markers. nil if not found.
func (c *Controller) Do() reconcile.Reconciler { return c.do }

// Cache is the Cache the controller was adopted with (its sources' shims).
func (c *Controller) Cache() *Cache { return c.cache }

// Name is the controller's name.
func (c *Controller) Name() string { return c.name }

// Start starts the controller: its sources register their handlers with
// the Cache's shims. It returns once they have (the workers then wait on
// the capture queue until ctx ends); done receives Start's result then.
func (c *Controller) Start(ctx context.Context) (done <-chan error, _ error) {
	moved, err := c.foreignCaches()
	if err != nil {
		return nil, err
	}
	for _, m := range moved {
		c.log(nil).Info("a source on a cache the project built is served as the manager cache's are: its events come from the hub or an ApiServerSource", "kind", m)
	}
	c.raw = c.rawSources() // Start empties the list
	errc := make(chan error, 1)
	go func() { errc <- c.ctrl.Start(ctx) }()
	select {
	case <-c.queue.getting:
		return errc, nil
	case err := <-errc:
		if err == nil {
			err = errors.New("it stopped before its sources started")
		}
		return nil, fmt.Errorf("starting controller %s: %w", c.name, err)
	}
}

// foreignCaches moves, before anything starts, each source.Kind on a
// cache that is not one of this package's (the manager's Cache, its forks
// and owned views) onto the controller's Cache: a cache the project built
// with cache.New for WatchesRawSource(source.Kind(theirs, ...)). Its
// events then come as the manager cache's do (the hub, an
// ApiServerSource), and starting the controller no longer waits for that
// cache to connect and sync (the 30 s hang of a describe). The project's
// cache itself is left as it is: what it serves its reads from, started
// by the project (mgr.Add), or not. What the project restricted it to
// (its cache.Options) is not read: the hub watches the kind wider. The
// moves are reported for the log.
func (c *Controller) foreignCaches() (moved []string, _ error) {
	watches, ok := c.startWatches()
	if !ok {
		return nil, nil
	}
	ours := reflect.TypeFor[Cache]().PkgPath() // the adopted Cache, its forks and views
	for i := range watches.Len() {
		src := watches.Index(i)
		for src.Kind() == reflect.Interface || src.Kind() == reflect.Pointer {
			if src.IsNil() {
				break
			}
			src = src.Elem()
		}
		if src.Kind() != reflect.Struct {
			continue
		}
		cf, tf := src.FieldByName("Cache"), src.FieldByName("Type")
		if !cf.IsValid() || cf.Kind() != reflect.Interface || cf.IsNil() || !tf.IsValid() {
			continue // not a source.Kind (a Channel, a Func)
		}
		cv := cf.Elem()
		if t := cv.Type(); t.PkgPath() == ours || t.Kind() == reflect.Pointer && t.Elem().PkgPath() == ours {
			continue
		}
		kind := tf.Type().String()
		if tf.Kind() == reflect.Interface && !tf.IsNil() {
			kind = tf.Elem().Type().String()
		} else if tf.Kind() == reflect.Pointer && !tf.IsNil() {
			kind = tf.Type().Elem().String()
		}
		kind = strings.TrimPrefix(kind, "*")
		if !cf.CanAddr() || !reflect.TypeOf(c.cache).Implements(cf.Type()) {
			return moved, fmt.Errorf("controller %s watches %s through a cache of its own (%s, built with cache.New), not the manager's, and this opzero cannot move "+
				"that source onto the manager's: give the source mgr.GetCache() in serverless mode, or run --mode=classic", c.name, kind, cv.Type())
		}
		// The field is exported, but reached through the controller's
		// unexported startWatches: set through its address.
		reflect.NewAt(cf.Type(), unsafe.Pointer(cf.UnsafeAddr())).Elem().Set(reflect.ValueOf(c.cache))
		moved = append(moved, fmt.Sprintf("%s (from %s)", kind, cv.Type()))
	}
	return moved, nil
}

// startWatches is the controller's list of sources to start (its
// unexported startWatches, emptied by Start); ok is false for a controller
// of another shape.
func (c *Controller) startWatches() (_ reflect.Value, ok bool) {
	v := reflect.ValueOf(c.ctrl)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	watches := v.Elem().FieldByName("startWatches")
	return watches, watches.IsValid() && watches.Kind() == reflect.Slice
}

// RawSource is one of a controller's sources that watch no kind.
type RawSource struct {
	// Name is source.Channel, source.Func, or a custom source's Go type.
	Name string
	// File and Line are where its code is, when it has code of its own:
	// a source.Func's function, a custom source's Start method. A
	// channel's are empty: what feeds it is the project's own code.
	File string
	Line int
}

// Fed says whether what the source sends can reach the operator at zero
// by another path: a source.Channel's events are the project's own, which
// builder.WatchesEvents takes through the Broker instead. A source.Func
// or a custom source runs code of its own in the process, which nothing
// runs at zero.
func (s RawSource) Fed() bool { return s.Name == "source.Channel" }

// RawSources are the controller's sources that watch no kind
// (source.Channel, source.Func, a custom source.Source), as Start found
// them: what they add is reconciled while an instance runs, and nothing
// feeds them at zero.
func (c *Controller) RawSources() []RawSource { return c.raw }

func (c *Controller) rawSources() []RawSource {
	watches, ok := c.startWatches()
	if !ok {
		return nil
	}
	var out []RawSource
	for i := range watches.Len() {
		src := watches.Index(i)
		for src.Kind() == reflect.Interface && !src.IsNil() {
			src = src.Elem()
		}
		t := src.Type()
		s := src
		for s.Kind() == reflect.Pointer && !s.IsNil() {
			s = s.Elem()
		}
		if s.Kind() == reflect.Struct && s.FieldByName("Cache").IsValid() && s.FieldByName("Type").IsValid() {
			continue // a source.Kind
		}
		name := t.String()
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i]
		}
		rs := RawSource{Name: name}
		switch name {
		case "*source.channel":
			rs.Name = "source.Channel"
		case "source.TypedFunc", "source.Func":
			rs.Name = "source.Func"
			rs.File, rs.Line = funcLine(src)
		default:
			rs.File, rs.Line = methodLine(t, "Start")
		}
		out = append(out, rs)
	}
	return out
}

// funcLine is where function value fn is declared; "" for none.
func funcLine(fn reflect.Value) (string, int) {
	if fn.Kind() != reflect.Func || fn.IsNil() {
		return "", 0
	}
	return pcLine(fn.Pointer())
}

// methodLine is where type t's method name is declared, looked up on t
// and, for a pointer, on what it points to (the method set of *T wraps
// T's methods in code of no file).
func methodLine(t reflect.Type, name string) (string, int) {
	for {
		if m, ok := t.MethodByName(name); ok {
			if file, line := pcLine(m.Func.Pointer()); file != "" {
				return file, line
			}
		}
		if t.Kind() != reflect.Pointer {
			return "", 0
		}
		t = t.Elem()
	}
}

func pcLine(pc uintptr) (string, int) {
	fn := runtime.FuncForPC(pc)
	if fn == nil {
		return "", 0
	}
	file, line := fn.FileLine(fn.Entry())
	if file == "" || strings.HasPrefix(file, "<") {
		return "", 0 // <autogenerated>
	}
	return file, line
}

// PrimaryKind is the kind given to the builder's For, read from the
// controller's logger (see Logger); ok is false for a controller built
// otherwise.
func (c *Controller) PrimaryKind() (schema.GroupKind, bool) {
	l := c.log(nil)
	kind, ok := Value(l, "controllerKind")
	if !ok || kind == "" {
		return schema.GroupKind{}, false
	}
	group, _ := Value(l, "controllerGroup")
	return schema.GroupKind{Group: group, Kind: kind}, true
}

// SelfMappedKind finds the kind a controller built without For reconciles
// (Watches(&Kind{}, &handler.EnqueueRequestForObject{}), as some projects
// write it): the one watched kind whose handlers map an object to its own
// key, tried with a probe object of each kind through the controller's
// handlers and predicates. ok is false when no kind, or more than one,
// does.
func (c *Controller) SelfMappedKind() (schema.GroupKind, bool) {
	var found []schema.GroupKind
	for _, inf := range c.cache.Informers() {
		obj, ok := inf.Prototype().DeepCopyObject().(client.Object)
		if !ok {
			continue
		}
		obj.SetNamespace("opzero-probe")
		obj.SetName("opzero-probe")
		obj.GetObjectKind().SetGroupVersionKind(inf.GVK())
		own := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "opzero-probe", Name: "opzero-probe"}}
		for _, r := range c.Deliver(inf.GVK(), Added, obj) {
			if r == own {
				found = append(found, inf.GVK().GroupKind())
				break
			}
		}
	}
	if len(found) != 1 {
		return schema.GroupKind{}, false
	}
	return found[0], true
}

// Deliver plays one event through the handlers registered for its kind and
// returns the requests they added (each once). An update is delivered with
// the previous object seen for the key as the old one; with none, as a
// create in the initial list (see the package doc).
func (c *Controller) Deliver(gvk schema.GroupVersionKind, typ EventType, obj client.Object) []reconcile.Request {
	inf, ok := c.cache.Lookup(gvk)
	if !ok {
		return nil
	}
	handlers := inf.Handlers()
	k := seenKey{gvk: gvk, key: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	old := c.seen[k]
	switch typ {
	case Deleted:
		delete(c.seen, k)
	default:
		if obj.GetUID() != "" { // a whole object, not a name-only reference
			if len(c.seen) >= maxSeen {
				for any := range c.seen {
					delete(c.seen, any)
					break
				}
			}
			c.seen[k] = obj
		}
	}
	return c.queue.during(func() {
		for _, h := range handlers {
			switch {
			case typ == Deleted:
				h.OnDelete(obj)
			case typ == Updated && old != nil:
				h.OnUpdate(old, obj)
			case typ == Updated:
				h.OnAdd(obj, true)
			default:
				h.OnAdd(obj, false)
			}
		}
	})
}

// Reconcile runs the controller's own Reconcile (its panic recovery and
// timeout) with its logger in ctx, as its workers would.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx = logf.IntoContext(ctx, c.log(&req).WithValues("reconcileID", string(uuid.NewUUID())))
	return c.ctrl.Reconcile(ctx, req)
}
