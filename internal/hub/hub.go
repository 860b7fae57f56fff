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
	dyn   dynamic.Interface
	raw   *rest.RESTClient // whole-object watches (rawObject)
	meta  metadata.Interface
	kinds *kinds
	host  string
	opts  Options
	stats *Stats

	mu      sync.Mutex
	subs    map[types.NamespacedName]*sub
	watches map[watchKey]*sharedWatch
	indexes map[indexKey]*refIndex
	tokens  map[string]func(context.Context) (string, error)
	wakeOps string // the operators the wakeup source serves, joined
	stopWk  context.CancelFunc

	recheck chan struct{}
	health  health
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
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
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
	return &Hub{dyn: dyn, raw: raw, meta: md, kinds: k, host: cfg.Host, opts: o, stats: newStats(),
		subs: map[types.NamespacedName]*sub{}, watches: map[watchKey]*sharedWatch{}, indexes: map[indexKey]*refIndex{},
		tokens: map[string]func(context.Context) (string, error){}, recheck: make(chan struct{}, 1)}, nil
}

// Stats are the hub's counters (also served as Prometheus metrics).
func (h *Hub) Stats() *Stats { return h.stats }

// Run serves until ctx ends.
func (h *Hub) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer h.stopAll()
	wg.Add(2)
	go func() { defer wg.Done(); h.watchRBAC(ctx) }()
	go func() { defer wg.Done(); h.flushLoop(ctx) }()
	tick := time.NewTicker(h.opts.Recheck)
	defer tick.Stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
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
	return nil
}

// watchSubscriptions lists the Subscriptions, serves them, and follows
// their changes until the watch ends.
func (h *Hub) watchSubscriptions(ctx context.Context) error {
	list, err := h.dyn.Resource(subscriptionsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Subscriptions: %w", err)
	}
	seen := map[types.NamespacedName]bool{}
	for i := range list.Items {
		s, unknown, err := toSubscription(&list.Items[i])
		if err != nil {
			h.opts.Log.Error(err, "a Subscription the hub cannot read; skipped")
			continue
		}
		seen[keyOf(s)] = true
		h.update(ctx, s, unknown)
	}
	h.mu.Lock()
	var gone []types.NamespacedName
	for k := range h.subs {
		if !seen[k] {
			gone = append(gone, k)
		}
	}
	h.mu.Unlock()
	for _, k := range gone {
		h.remove(k)
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
				h.remove(keyOf(u))
				h.rewire(ctx)
				continue
			}
			s, unknown, err := toSubscription(u)
			if err != nil {
				h.opts.Log.Error(err, "a Subscription the hub cannot read; skipped")
				continue
			}
			h.update(ctx, s, unknown)
			h.rewire(ctx)
		}
	}
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

// update takes a new version of a Subscription and checks it.
//
// unknown are the spec's fields this hub does not know (toSubscription):
// the Subscription is then refused.
func (h *Hub) update(ctx context.Context, obj *v1alpha1.Subscription, unknown []string) {
	key := keyOf(obj)
	h.mu.Lock()
	s := h.subs[key]
	if s == nil {
		s = newSub(h, obj)
		h.subs[key] = s
	} else if s.generation() == obj.Generation {
		h.mu.Unlock()
		return // a status write (ours): nothing to check
	}
	s.setSpec(obj, unknown)
	h.mu.Unlock()
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
	var ops []string
	for _, s := range h.subs {
		if !s.ready() {
			continue
		}
		for _, a := range s.attachments {
			want[a.key] = append(want[a.key], a)
			if a.ref != nil {
				wantIdx[a.ref.key] = true
			}
		}
		if s.spec().Wakeups {
			ops = append(ops, wakeupOperators(s.spec())...)
		}
	}
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
	h.stats.indexWatches.Set(float64(own))
	h.stats.watches.Set(float64(len(h.watches)))
	h.stats.subscriptions.Set(float64(len(h.subs)))
	if !h.opts.NoWakeups {
		h.rewireWakeups(ctx, ops)
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

// wakeupOperators are the operators whose Wakeups go to spec's sink: the
// operator and the other controllers of its binary.
func wakeupOperators(spec v1alpha1.SubscriptionSpec) []string {
	return append([]string{spec.Operator}, spec.Operators...)
}

// routeWakeup sends a Wakeup of operator in namespace to its
// Subscription's sink: the one Ready Subscription of that operator, or of
// several, the one whose sink is the record's.
func (h *Hub) routeWakeup(ctx context.Context, operator, _, sink string) (string, string, error) {
	h.mu.Lock()
	var match []*sub
	for _, s := range h.subs {
		if s.spec().Wakeups && s.ready() && slices.Contains(wakeupOperators(s.spec()), operator) {
			match = append(match, s)
		}
	}
	h.mu.Unlock()
	var to *sub
	switch {
	case len(match) == 1:
		to = match[0]
	default:
		for _, s := range match {
			if s.sinkURL() == sink {
				to = s
			}
		}
	}
	if to == nil {
		return "", "", fmt.Errorf("no Ready Subscription of operator %q with sink %s takes wakeups", operator, sink)
	}
	tok, err := h.token(ctx, to.spec().Sink.Audience)
	return to.sinkURL(), tok, err
}

func (h *Hub) stopAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watches {
		w.stop()
	}
	for _, ix := range h.indexes {
		ix.stop()
	}
	for _, s := range h.subs {
		s.stop()
	}
	if h.stopWk != nil {
		h.stopWk()
	}
}
