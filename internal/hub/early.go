package hub

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// Early delivery. A send to a Knative Service at zero pods waits in the
// activator until the pod it started is Ready: the kubelet's relist and
// readiness probe of queue-proxy, the pod's status, the endpoints, the
// activator's own probe. On the real node that is 0.7-1 s after the
// operator's process is already listening, idle. So when a send to a
// Knative Service is not answered within earlyAfter, the hub also posts
// the same event (same ID, same token) to the user container of a pod of
// that Service that is starting (an endpoint of its private Service,
// not ready yet) as soon as that container accepts the connection. The
// first of the two answers that settles the send (2xx, or the operator's
// 500 "failed, retry scheduled") counts, and the other request is
// cancelled: the send is settled exactly as it would have been by one
// answer. Any other answer of the pod (a 503 while it starts, a 4xx) or
// no pod to try leaves the send to the route, as before. When a pod of
// the Service is ready, the route serves it and nothing is posted
// directly.
//
// The operator authenticates the direct request as any other (the hub's
// token for the sink's audience); what it costs is an EndpointSlice
// watch, in the Subscription's namespace, while a send waits.

// earlyAfter is how long a send waits for its answer through the route
// before the hub looks for a starting pod: a warm operator answers well
// within it, a cold start takes a second or more.
const earlyAfter = 100 * time.Millisecond

// earlyRetry is how often a starting pod's container is dialed again
// while nothing listens in it yet.
const earlyRetry = 20 * time.Millisecond

var (
	endpointSlices = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	knServices     = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
)

// earlyClient posts to pods directly: a short dial timeout (a pod's
// address that does not answer is tried again), no connection kept (one
// pod's start), no overall timeout (the send's context bounds it).
var earlyClient = &http.Client{Transport: &http.Transport{
	DialContext:       (&net.Dialer{Timeout: 300 * time.Millisecond}).DialContext,
	DisableKeepAlives: true,
}}

// starting follows, while sends of a Subscription wait, the pods of its
// sink's Knative Service (the EndpointSlices of its private Services).
type starting struct {
	h       *Hub
	ns, svc string

	mu      sync.Mutex
	users   int
	cancel  context.CancelFunc
	targets []string // URLs of the starting pods' user containers
	ready   bool     // a pod of the Service is ready: the route serves
	failed  bool     // the watch failed: nothing to post to directly
	changed chan struct{}
}

// knativeService is the sink's Knative Service's name, "" when the sink
// is not one (or early delivery is off).
func (s *sub) knativeService() string {
	if s.h.opts.NoEarlyDelivery {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.obj.Spec.Sink.Ref
	if r == nil || r.Kind != "Service" {
		return ""
	}
	if gv, err := schema.ParseGroupVersion(r.APIVersion); err != nil || gv.Group != knServices.Group {
		return ""
	}
	return r.Name
}

// startingPods is the follower of the sink's pods, nil when the sink is
// not a Knative Service.
func (s *sub) startingPods() *starting {
	name := s.knativeService()
	if name == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.early == nil || s.early.svc != name {
		s.early = &starting{h: s.h, ns: s.key.Namespace, svc: name, changed: make(chan struct{})}
	}
	return s.early
}

// postSink posts ev to the sink at url and, when the sink is a Knative
// Service and the answer takes longer than earlyAfter, to a starting pod
// of it too (see Early delivery above).
func (s *sub) postSink(ctx context.Context, url, audience string, ev *event.Event) (time.Duration, error) {
	st := s.startingPods()
	if st == nil {
		return s.h.post(ctx, s.h.opts.HTTP, url, audience, ev)
	}
	type answer struct {
		wait time.Duration
		err  error
		ok   bool // early: the pod's answer settles the send
	}
	routeCtx, cancelRoute := context.WithCancel(ctx)
	defer cancelRoute()
	route := make(chan answer, 1)
	go func() {
		w, err := s.h.post(routeCtx, s.h.opts.HTTP, url, audience, ev)
		route <- answer{w, err, true}
	}()
	t := time.NewTimer(earlyAfter)
	select {
	case a := <-route:
		t.Stop()
		return a.wait, a.err
	case <-t.C:
	}
	st.acquire()
	defer st.release()
	earlyCtx, cancelEarly := context.WithCancel(ctx)
	defer cancelEarly()
	early := make(chan answer, 1)
	go func() {
		w, err, ok := st.post(earlyCtx, audience, ev)
		early <- answer{w, err, ok}
	}()
	for {
		select {
		case a := <-route:
			return a.wait, a.err
		case a := <-early:
			if a.ok {
				s.h.stats.early.Inc()
				return a.wait, a.err
			}
			early = nil // the route's answer decides
		}
	}
}

// post posts ev to a starting pod once one listens: ok when its answer
// settles the send (2xx or 500), not ok when there is no starting pod to
// try (one is ready, or none can be found), the pod answered anything
// else, or ctx ended.
func (st *starting) post(ctx context.Context, audience string, ev *event.Event) (time.Duration, error, bool) {
	for {
		url := st.target(ctx)
		if url == "" {
			return 0, nil, false
		}
		wait, err := st.h.post(ctx, earlyClient, url, audience, ev)
		if err == nil || handedOver(err) {
			return wait, err, true
		}
		var se sendError
		if errors.As(err, &se) || ctx.Err() != nil {
			return 0, nil, false
		}
		// Nothing listens there yet (refused), or the dial timed out.
		select {
		case <-ctx.Done():
			return 0, nil, false
		case <-time.After(earlyRetry):
		}
	}
}

// target waits for a starting pod and returns its user container's URL;
// "" once a pod is ready, the watch failed, or ctx ended.
func (st *starting) target(ctx context.Context) string {
	for {
		st.mu.Lock()
		if st.ready || st.failed {
			st.mu.Unlock()
			return ""
		}
		if len(st.targets) > 0 {
			u := st.targets[0]
			st.mu.Unlock()
			return u
		}
		ch := st.changed
		st.mu.Unlock()
		select {
		case <-ctx.Done():
			return ""
		case <-ch:
		}
	}
}

// acquire starts following the pods for a waiting send; release stops
// when no send waits any more.
func (st *starting) acquire() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.users++; st.users == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		st.cancel = cancel
		st.targets, st.ready, st.failed = nil, false, false
		go st.follow(ctx)
	}
}

func (st *starting) release() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.users--; st.users == 0 {
		st.cancel()
	}
}

// follow lists and watches the Service's private EndpointSlices until
// ctx ends.
func (st *starting) follow(ctx context.Context) {
	port, err := st.userPort(ctx)
	if err != nil {
		st.fail(ctx, err)
		return
	}
	res := st.h.dyn.Resource(endpointSlices).Namespace(st.ns)
	sel := metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + st.svc + ",networking.internal.knative.dev/serviceType=Private"}
	for ctx.Err() == nil {
		l, err := res.List(ctx, sel)
		if err != nil {
			st.fail(ctx, err)
			return
		}
		slices := map[string]*unstructured.Unstructured{}
		for i := range l.Items {
			slices[l.Items[i].GetName()] = &l.Items[i]
		}
		st.publish(slices, port)
		wo := sel
		wo.ResourceVersion = l.GetResourceVersion()
		w, err := res.Watch(ctx, wo)
		if err != nil {
			st.fail(ctx, err)
			return
		}
		for e := range w.ResultChan() {
			u, ok := e.Object.(*unstructured.Unstructured)
			if !ok {
				break // an error: list again
			}
			switch e.Type {
			case watch.Added, watch.Modified:
				slices[u.GetName()] = u
			case watch.Deleted:
				delete(slices, u.GetName())
			}
			st.publish(slices, port)
		}
		w.Stop()
	}
}

// userPort is the Service's container port (Knative's default 8080).
func (st *starting) userPort(ctx context.Context) (int64, error) {
	u, err := st.h.dyn.Resource(knServices).Namespace(st.ns).Get(ctx, st.svc, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		cm, _ := c.(map[string]any)
		ps, _, _ := unstructured.NestedSlice(cm, "ports")
		for _, p := range ps {
			if n, ok, _ := unstructured.NestedInt64(p.(map[string]any), "containerPort"); ok && n > 0 {
				return n, nil
			}
		}
	}
	return 8080, nil
}

// publish sets the targets from slices: the addresses of endpoints
// neither ready nor terminating, unless one is ready.
func (st *starting) publish(slices map[string]*unstructured.Unstructured, port int64) {
	var targets []string
	ready := false
	for _, s := range slices {
		eps, _, _ := unstructured.NestedSlice(s.Object, "endpoints")
		for _, ep := range eps {
			m, _ := ep.(map[string]any)
			r, _, _ := unstructured.NestedBool(m, "conditions", "ready")
			term, _, _ := unstructured.NestedBool(m, "conditions", "terminating")
			addrs, _, _ := unstructured.NestedStringSlice(m, "addresses")
			switch {
			case term || len(addrs) == 0:
			case r:
				ready = true
			default:
				targets = append(targets, "http://"+net.JoinHostPort(addrs[0], strconv.FormatInt(port, 10))+"/")
			}
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.targets, st.ready = targets, ready
	close(st.changed)
	st.changed = make(chan struct{})
}

// fail ends early delivery until no send waits any more; the sends go
// through the route alone.
func (st *starting) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	st.h.opts.Log.V(1).Info("not following the sink's starting pods; sends go through the route alone", "namespace", st.ns, "service", st.svc, "err", err.Error())
	st.mu.Lock()
	defer st.mu.Unlock()
	st.failed = true
	close(st.changed)
	st.changed = make(chan struct{})
}
