package hub

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// Options configures a Hub.
type Options struct {
	// Identity is the hub's own service account, namespace/name: its
	// TokenRequest tokens authenticate deliveries to sinks with an
	// audience. Empty sends no token.
	Identity types.NamespacedName
	// Recheck is how often every Subscription is checked again (sink,
	// RBAC) besides on changes of it and of RBAC objects (5 min); those
	// not Ready are checked every 5 s.
	Recheck time.Duration
	// Flush is how often progress is written to the Subscriptions (2 s).
	Flush time.Duration
	// HTTP sends the events (a client with a 30 s timeout that keeps
	// deliveryIdleConns connections per sink open between deliveries).
	HTTP *http.Client
	Log  logr.Logger
	// NoWakeups runs no wakeup source (tests of the event path).
	NoWakeups bool
	// NoEarlyDelivery posts events only to the sink's address: not also
	// to a starting pod of a Knative Service sink while the route waits
	// for it to be ready (package starting).
	NoEarlyDelivery bool
	// Starting follows the sinks' starting pods for early delivery and
	// takes their announcements (package starting); nil: the hub makes
	// its own (unless NoEarlyDelivery). Share one with the admission
	// endpoint so that both use the pods' announcements.
	Starting *starting.Services

	// LeaseNamespace is where the bucket Leases are (the hub's
	// namespace): replicas share the Subscriptions by bucket (package
	// bucket). Empty: no election, this process serves every Subscription.
	LeaseNamespace string
	// Buckets is how many buckets the Subscriptions are hashed into (4);
	// every replica must use the same number.
	Buckets int
	// ReplicaID names this process in the Leases (default: the host name
	// and a random suffix).
	ReplicaID string
	// Version is the hub's version, written on the Leases it holds
	// (default: the binary's module version or VCS revision).
	Version string
	// LeaseDuration, RenewDeadline and RetryPeriod of the bucket Leases
	// (10 s, 7 s, 2 s): see bucket.Options.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Drain bounds how long a graceful stop waits for the sends under way
	// before it writes the progress and releases its buckets (5 s).
	Drain time.Duration
	// LightStandby: a replica that finds bucket 0 held by another only
	// reads the Leases (bucket.Elector.Wait) until it takes bucket 0, then
	// starts as any replica does. Meanwhile it watches no Subscription and
	// checks none; it takes the buckets over as soon as a full standby
	// would (its observations of the Leases are the elector's). An
	// admission endpoint beside it is served all the same: ServingPods
	// reads the Subscription it is asked about. Ignored without
	// LeaseNamespace.
	LightStandby bool
}

// deliveryIdleConns is how many idle connections the hub keeps to each
// sink: a Subscription's default concurrency (16) and more. With
// net/http's default of 2, 14 of 16 concurrent deliveries closed their
// connection after each answer and the next one dialed again, which cost
// the hub, the operator and the kernel a TCP connection per event.
const deliveryIdleConns = 64

// Hub serves every Subscription of a cluster: see the package
// documentation.
type Hub struct {
	cfg   *rest.Config
	dyn   dynamic.Interface
	raw   *rest.RESTClient // whole-object watches (rawObject)
	meta  metadata.Interface
	kinds *kinds
	host  string
	opts  Options
	stats *Stats
	epoch *epoch // EpochHeader's value

	el      elector // the buckets this replica holds
	changed chan struct{}

	mu      sync.Mutex
	subs    map[types.NamespacedName]*sub // the Subscriptions served: of the buckets served
	all     map[types.NamespacedName]*v1alpha1.Subscription
	served  map[int]bool // buckets whose Subscriptions are in subs
	dropped map[int]bool // buckets lost since the loop last looked (maybe won again)
	watches map[watchKey]*sharedWatch
	indexes map[indexKey]*refIndex
	tokens  map[string]func(context.Context) (string, error)
	wakeOps string // the operators the wakeup source serves, joined
	stopWk  context.CancelFunc
	// stopRBAC ends the watches of RBAC objects, which run only while
	// this replica serves a Subscription (only those are checked again
	// when RBAC changes); bg waits for them.
	stopRBAC context.CancelFunc
	bg       sync.WaitGroup

	// targets are the Deployment sinks of every Subscription of the
	// cluster, namespace/name (scalingChange), set whenever all changes.
	targets atomic.Pointer[map[string]bool]

	recheck chan struct{}
	health  health
	// standing is set while a light standby waits for a bucket.
	standing atomic.Bool
	// starting follows the starting pods of Knative Service sinks (early
	// delivery); nil with NoEarlyDelivery. direct posts to them (with the
	// epoch, as opts.HTTP).
	starting *starting.Services
	direct   *http.Client
}

// New returns a Hub that talks to the API server of cfg.
func New(cfg *rest.Config, o Options) (*Hub, error) {
	if o.Recheck <= 0 {
		o.Recheck = 5 * time.Minute
	}
	if o.Flush <= 0 {
		o.Flush = 2 * time.Second
	}
	if o.HTTP == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = deliveryIdleConns
		o.HTTP = &http.Client{Transport: t, Timeout: 30 * time.Second}
	}
	ep := newEpoch()
	o.HTTP = withEpoch(o.HTTP, ep)
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.Drain <= 0 {
		o.Drain = 5 * time.Second
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw, err := newRawClient(cfg)
	if err != nil {
		return nil, err
	}
	k, err := newKinds(cfg)
	if err != nil {
		return nil, err
	}
	h := &Hub{cfg: cfg, dyn: dyn, raw: raw, meta: md, kinds: k, host: cfg.Host, opts: o, epoch: ep,
		subs: map[types.NamespacedName]*sub{}, watches: map[watchKey]*sharedWatch{}, indexes: map[indexKey]*refIndex{},
		all: map[types.NamespacedName]*v1alpha1.Subscription{}, served: map[int]bool{}, dropped: map[int]bool{},
		tokens: map[string]func(context.Context) (string, error){}, recheck: make(chan struct{}, 1), changed: make(chan struct{}, 1)}
	h.el = h.newElector()
	h.stats = newStats(h.el)
	if !o.NoEarlyDelivery {
		h.starting = o.Starting
		if h.starting == nil {
			h.starting = starting.NewServices(dyn, o.Log)
		}
		h.direct = withEpoch(starting.Client, ep)
	}
	return h, nil
}

// Stats are the hub's counters (also served as Prometheus metrics).
func (h *Hub) Stats() *Stats { return h.stats }

// Run serves until ctx ends, then hands its buckets over: it stops
// sending, writes its progress and releases its Leases.
func (h *Hub) Run(ctx context.Context) error {
	if err := h.standBy(ctx); err != nil {
		return nil // stopped while standing by: nothing held, nothing to hand over
	}
	// life outlives ctx by the hand-off: the Leases are renewed, and the
	// progress written, until the sends under way are settled.
	life, end := context.WithCancel(context.WithoutCancel(ctx))
	defer end()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer h.bg.Wait()
	wg.Add(3)
	go func() { defer wg.Done(); h.el.Run(life) }()
	go func() { defer wg.Done(); h.flushLoop(life) }()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(h.opts.Recheck)
		defer tick.Stop()
		for {
			select {
			case <-life.Done():
				return
			case <-tick.C:
				h.poke()
			}
		}
	}()
	for ctx.Err() == nil {
		err := h.watchSubscriptions(ctx)
		h.health.set(false, err)
		if ctx.Err() != nil {
			break
		}
		h.opts.Log.Error(err, "watch of Subscriptions ended; watching again in 1s")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	h.handOff(life)
	end() // the elector releases the Leases
	return nil
}

// watchSubscriptions lists the Subscriptions, serves those of the buckets
// held, and follows their changes (and the buckets') until the watch ends.
func (h *Hub) watchSubscriptions(ctx context.Context) error {
	held := h.el.Held() // before the list: a bucket won after it is promoted by the loop
	list, err := h.dyn.Resource(subscriptionsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Subscriptions: %w", err)
	}
	lost, _ := h.serve(held)
	h.demote(lost)
	all := map[types.NamespacedName]*v1alpha1.Subscription{}
	for i := range list.Items {
		s, err := toSubscription(&list.Items[i])
		if err != nil {
			h.opts.Log.Error(err, "a Subscription the hub cannot read; skipped")
			continue
		}
		all[keyOf(s)] = s
	}
	h.mu.Lock()
	h.all = all
	h.setTargets()
	var gone []types.NamespacedName
	for k := range h.subs {
		if all[k] == nil {
			gone = append(gone, k)
		}
	}
	h.mu.Unlock()
	for _, k := range gone {
		h.remove(k)
	}
	for _, s := range all {
		h.update(ctx, s, list.GetResourceVersion())
	}
	h.rewire(ctx)
	w, err := h.dyn.Resource(subscriptionsGVR).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), AllowWatchBookmarks: true})
	if err != nil {
		return fmt.Errorf("watching Subscriptions: %w", err)
	}
	defer w.Stop()
	h.health.set(true, nil)
	unready := time.NewTicker(5 * time.Second)
	defer unready.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.changed:
			if err := h.rebucket(ctx); err != nil {
				return err
			}
		case <-h.recheck:
			// RBAC changes come in bursts (an install): check once after it.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			select {
			case <-h.recheck:
			default:
			}
			h.checkAll(ctx, false)
		case <-unready.C:
			h.checkAll(ctx, true)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of Subscriptions closed")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watch of Subscriptions: %w", apierrors.FromObject(ev.Object))
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type == watch.Deleted {
				h.mu.Lock()
				delete(h.all, keyOf(u))
				h.setTargets()
				h.mu.Unlock()
				h.handBack(ctx, keyOf(u))
				h.remove(keyOf(u))
				h.rewire(ctx)
				continue
			}
			s, err := toSubscription(u)
			if err != nil {
				h.opts.Log.Error(err, "a Subscription the hub cannot read; skipped")
				continue
			}
			h.mu.Lock()
			h.all[keyOf(s)] = s
			h.setTargets()
			h.mu.Unlock()
			h.update(ctx, s, "")
			h.rewire(ctx)
		}
	}
}

// setTargets records the Deployment sinks of h.all. Called with h.mu held.
func (h *Hub) setTargets() {
	t := map[string]bool{}
	for k, s := range h.all {
		if isDeploymentSink(s.Spec.Sink) {
			t[k.Namespace+"/"+s.Spec.Sink.Ref.Name] = true
		}
	}
	h.targets.Store(&t)
}

// poke asks for every Subscription to be checked again (RBAC changed, or
// the periodic recheck).
func (h *Hub) poke() {
	select {
	case h.recheck <- struct{}{}:
	default:
	}
}

// checkAll checks every Subscription again (only those not Ready when
// unready: a sink that appears, a CRD installed later) and rewires.
func (h *Hub) checkAll(ctx context.Context, unready bool) {
	h.mu.Lock()
	all := make([]*sub, 0, len(h.subs))
	for _, s := range h.subs {
		if !unready || !s.ready() {
			all = append(all, s)
		}
	}
	h.mu.Unlock()
	if len(all) == 0 {
		return
	}
	for _, s := range all {
		h.check(ctx, s)
	}
	h.rewire(ctx)
}

// update takes a new version of a Subscription and checks it, if its
// bucket is served. A Subscription served from now on starts from the
// progress in obj; takeover is the resourceVersion at which it was read
// (changes up to it the bucket's previous holder may have sent).
func (h *Hub) update(ctx context.Context, obj *v1alpha1.Subscription, takeover string) {
	key := keyOf(obj)
	h.mu.Lock()
	if !h.served[h.bucketOf(key)] {
		h.mu.Unlock()
		return
	}
	s := h.subs[key]
	var replaced *sub
	if s != nil && s.uid() != obj.UID {
		// deleted and created again while the watch was away (a relist
		// shows only the new one): the old one's progress is not its
		replaced, s = s, nil
	}
	if s == nil {
		s = newSub(h, obj)
		s.takeover = h.takeoverAt(key, takeover)
		h.subs[key] = s
	} else if s.generation() == obj.Generation {
		h.mu.Unlock()
		return // a status write (ours): nothing to check
	}
	s.setSpec(obj)
	h.mu.Unlock()
	if replaced != nil {
		replaced.stop()
	}
	h.check(ctx, s)
}

// remove forgets a deleted Subscription.
func (h *Hub) remove(key types.NamespacedName) {
	h.mu.Lock()
	s := h.subs[key]
	delete(h.subs, key)
	h.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// rewire makes the shared watches, the referrer indexes and the wakeup
// source match the Ready Subscriptions, then writes the statuses that
// changed: a Subscription shown not Ready gets nothing more from then on.
func (h *Hub) rewire(ctx context.Context) {
	h.wire(ctx)
	h.flush(ctx)
}

// wire starts what the Ready Subscriptions need, stops what they do not,
// and tells each watch its subscribers.
func (h *Hub) wire(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[watchKey][]*attachment{}
	wantIdx := map[indexKey]bool{}
	users := map[indexKey][]*attachment{}
	for _, s := range h.subs {
		if !s.ready() {
			continue
		}
		for _, a := range s.attachments {
			want[a.key] = append(want[a.key], a)
			if a.ref != nil {
				wantIdx[a.ref.key] = true
				users[a.ref.key] = append(users[a.ref.key], a)
			}
		}
	}
	ops := h.wakeupOperators()
	// A referrer index is fed by the shared watch of the same objects when
	// there is one (tapOf), else it watches them itself; one whose feed
	// changes starts again.
	tapOf := func(k indexKey) watchKey { return watchKey{gvr: k.gvr, ns: k.ns, full: true} }
	for k, ix := range h.indexes {
		if !wantIdx[k] || (ix.tap != nil) != (want[tapOf(k)] != nil) {
			ix.stop()
			delete(h.indexes, k)
		}
	}
	var started []*refIndex
	for k := range wantIdx {
		if h.indexes[k] == nil {
			h.indexes[k] = h.newIndex(k, nil) // its feed is set once the watches are
			started = append(started, h.indexes[k])
		}
	}
	for k, w := range h.watches {
		if want[k] == nil {
			w.stop()
			delete(h.watches, k)
		}
	}
	for k, atts := range want {
		for _, a := range atts {
			if a.ref != nil {
				a.ref.index.Store(h.indexes[a.ref.key]) // before the watch sees a (a new attachment)
			}
		}
		if w := h.watches[k]; w != nil {
			w.setSubscribers(atts)
		} else {
			h.watches[k] = h.startWatch(ctx, k, atts)
		}
	}
	for k, ix := range h.indexes {
		u := users[k]
		ix.users.Store(&u)
	}
	for _, ix := range started {
		ix.tap = h.watches[tapOf(ix.key)]
		ix.start(ctx)
	}
	own := 0
	for _, ix := range h.indexes {
		if ix.tap == nil {
			own++
		}
	}
	for _, s := range h.subs {
		s.mu.Lock()
		s.unwired = false
		s.mu.Unlock()
	}
	h.stats.indexWatches.Set(float64(own))
	h.stats.watches.Set(float64(len(h.watches)))
	h.stats.bucketsHeld.Set(float64(len(h.served)))
	h.stats.subscriptions.Set(float64(len(h.subs)))
	h.rewireRBAC(ctx)
	if !h.opts.NoWakeups {
		h.rewireWakeups(ctx, ops)
	}
}

// rewireRBAC watches RBAC objects while this replica serves a
// Subscription, and stops once it serves none (a standby, or a replica
// whose buckets hold no Subscription): a Subscription served from then on
// is checked when it is taken, and every Recheck after. Called with h.mu
// held.
func (h *Hub) rewireRBAC(ctx context.Context) {
	switch {
	case len(h.subs) > 0 && h.stopRBAC == nil:
		rctx, cancel := context.WithCancel(ctx)
		h.stopRBAC = cancel
		h.bg.Add(1)
		go func() { defer h.bg.Done(); h.watchRBAC(rctx) }()
	case len(h.subs) == 0 && h.stopRBAC != nil:
		h.stopRBAC()
		h.stopRBAC = nil
	}
}

// rewireWakeups (re)starts the wakeup source when the set of operators
// that ask for wakeups changed. Called with h.mu held.
func (h *Hub) rewireWakeups(ctx context.Context, ops []string) {
	sort.Strings(ops)
	ops = slices.Compact(ops)
	joined := strings.Join(ops, ",")
	if joined == h.wakeOps && (h.stopWk != nil || len(ops) == 0) {
		return
	}
	if h.stopWk != nil {
		h.stopWk()
		h.stopWk = nil
	}
	h.wakeOps = joined
	if len(ops) == 0 {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	h.stopWk = cancel
	src := wakesource.NewSource(wakesource.Dynamic(h.dyn), wakesource.SourceOptions{Operators: ops, Route: h.routeWakeup, HTTP: h.opts.HTTP,
		Log: h.opts.Log.WithName("wakeups"), Delivered: func(_, _ string, _, _ time.Time) { h.stats.wakeups.Inc() }})
	go func() { _ = src.Run(wctx) }()
}
