// Package starting lets the hub reach a Knative Service's pod while it
// starts, before Knative finds it ready: named for the pods it tracks
// (starting ones); what it gives the hub is early delivery.
//
// A request to a Knative Service at zero pods waits in the activator until
// the pod it started is Ready: the kubelet's relist and readiness probe of
// queue-proxy, the pod's status, the endpoints, the activator's own probe.
// On the real node that is 0.7-1 s after the operator's process already
// listens, idle. Race sends a request through the Service's address and,
// when no answer came within After, the same request to the user
// container of a pod of that Service that is starting (an endpoint of its
// private Service, neither ready nor terminating) as soon as that
// container accepts the connection; the first answer that settles it
// counts and the other request is cancelled. Nothing is posted directly
// once a pod of the Service is ready: the route serves it.
//
// What it costs is an EndpointSlice watch in the Service's namespace (its
// private slices only) while a request waits; the hub's service account
// reads EndpointSlices for it.
package starting

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// After is how long a request waits for its answer through the route
// before Race looks for a starting pod: a warm operator answers well
// within it, a cold start takes a second or more.
const After = 100 * time.Millisecond

// Retry is how often a starting pod's container is dialed again while
// nothing listens in it yet.
const Retry = 20 * time.Millisecond

var (
	endpointSlices = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	services       = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
)

// Client posts to pods directly: a short dial timeout (an address that
// does not answer is tried again), no connection kept (one pod's start),
// no overall timeout (the request's context bounds it).
var Client = &http.Client{Transport: &http.Transport{
	DialContext:       (&net.Dialer{Timeout: 300 * time.Millisecond}).DialContext,
	DisableKeepAlives: true,
}}

// IsKnativeService says whether apiVersion and kind name a Knative Service.
func IsKnativeService(apiVersion, kind string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && kind == "Service" && gv.Group == services.Group
}

// Outcome is what a direct attempt says.
type Outcome int

const (
	// Settled: the pod's answer is the request's answer.
	Settled Outcome = iota
	// Again: nothing listens there yet (refused, or the dial timed out).
	Again
	// GiveUp: the pod answered something else; the route's answer decides.
	GiveUp
)

// Race calls route at once and, if it has not returned within After,
// direct with the base URL (http://ip:port) of a starting pod of svc too,
// again every Retry while direct says Again, until one settles: it
// returns route's answer, or direct's when that is Settled first (early
// true). The other call's context is cancelled. With svc nil it is route.
func Race[T any](ctx context.Context, svc *Service, route func(context.Context) T, direct func(ctx context.Context, base string) (T, Outcome)) (answer T, early bool) {
	if svc == nil {
		return route(ctx), false
	}
	routeCtx, cancelRoute := context.WithCancel(ctx)
	defer cancelRoute()
	routed := make(chan T, 1)
	go func() { routed <- route(routeCtx) }()
	t := time.NewTimer(After)
	select {
	case a := <-routed:
		t.Stop()
		return a, false
	case <-t.C:
	}
	svc.acquire()
	defer svc.release()
	directCtx, cancelDirect := context.WithCancel(ctx)
	defer cancelDirect()
	type got struct {
		answer T
		ok     bool
	}
	directly := make(chan got, 1)
	go func() {
		for n := 0; ; n++ {
			base := svc.target(directCtx, n)
			if base == "" {
				directly <- got{}
				return
			}
			a, o := direct(directCtx, base)
			switch {
			case o == Settled:
				directly <- got{a, true}
				return
			case o == GiveUp || directCtx.Err() != nil:
				directly <- got{}
				return
			}
			select {
			case <-directCtx.Done():
				directly <- got{}
				return
			case <-time.After(Retry):
			}
		}
	}()
	for {
		select {
		case a := <-routed:
			return a, false
		case g := <-directly:
			if g.ok {
				return g.answer, true
			}
			directly = nil // the route's answer decides
		}
	}
}

// Services are the Knative Services followed, one each.
type Services struct {
	dyn dynamic.Interface
	log logr.Logger

	specs *utilcache.Expiring // recent reads of Knative Services (read): spec by types.NamespacedName

	mu sync.Mutex
	m  map[types.NamespacedName]*Service
}

// NewServices follows Knative Services' pods through dyn; log says (at V(1))
// when it cannot.
func NewServices(dyn dynamic.Interface, log logr.Logger) *Services {
	return &Services{dyn: dyn, log: log, m: map[types.NamespacedName]*Service{}, specs: utilcache.NewExpiring()}
}

// spec is what the hub reads of a Knative Service: its user container's
// port and the service account its pods run as.
type spec struct {
	port int64
	sa   string
}

// SpecFor is how long a read of a Knative Service is used. One cold start
// needs it twice, a second or so apart: the follower needs the port, the
// starting pod's announcement the service account.
const SpecFor = 10 * time.Second

// read is the Knative Service ns/name's spec, read at most SpecFor ago.
// Only reads that found the Service are kept (each one a Service that
// exists), until they expire.
func (s *Services) read(ctx context.Context, k types.NamespacedName) (spec, error) {
	if c, ok := s.specs.Get(k); ok {
		return c.(spec), nil
	}
	u, err := s.dyn.Resource(services).Namespace(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return spec{}, err
	}
	c := specOf(u)
	s.specs.Set(k, c, SpecFor)
	return c, nil
}

// specOf reads a Knative Service's spec: the first container port named
// (Knative's default 8080), the service account ("default" when it names
// none).
func specOf(u *unstructured.Unstructured) spec {
	c := spec{port: 8080}
	c.sa, _, _ = unstructured.NestedString(u.Object, "spec", "template", "spec", "serviceAccountName")
	if c.sa == "" {
		c.sa = "default"
	}
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	for _, ct := range cs {
		cm, _ := ct.(map[string]any)
		ps, _, _ := unstructured.NestedSlice(cm, "ports")
		for _, p := range ps {
			pm, _ := p.(map[string]any)
			if n, ok, _ := unstructured.NestedInt64(pm, "containerPort"); ok && n > 0 {
				c.port = n
				return c
			}
		}
	}
	return c
}

// Get is the Knative Service ns/name (nil receiver: nil, no racing).
func (s *Services) Get(ns, name string) *Service {
	if s == nil {
		return nil
	}
	k := types.NamespacedName{Namespace: ns, Name: name}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.m[k]
	if v == nil {
		v = &Service{dyn: s.dyn, log: s.log, key: k, changed: make(chan struct{}), read: s.read}
		s.m[k] = v
	}
	return v
}

// Service follows one Knative Service's pods while requests wait.
type Service struct {
	dyn  dynamic.Interface
	log  logr.Logger
	key  types.NamespacedName
	read func(context.Context, types.NamespacedName) (spec, error) // Services.read

	mu      sync.Mutex
	users   int                  // requests waiting
	uses    int                  // requests that waited, ever
	cancel  context.CancelFunc   // stops following (nil: not followed)
	listed  []string             // base URLs of the starting pods' user containers (EndpointSlices)
	gone    map[string]bool      // base URLs of terminating endpoints
	told    map[string]time.Time // base URLs pods announced (Announce), when
	ready   bool                 // a pod of the Service is ready: the route serves
	failed  bool                 // following failed: nothing to post to directly
	changed chan struct{}
}

// target waits for a starting pod and returns its user container's base
// URL, the n-th of those known (in turn); "" once a pod is ready,
// following failed, or ctx ended.
func (s *Service) target(ctx context.Context, n int) string {
	for {
		s.mu.Lock()
		if s.ready || s.failed {
			s.mu.Unlock()
			return ""
		}
		if ts := s.candidates(time.Now()); len(ts) > 0 {
			s.mu.Unlock()
			return ts[n%len(ts)]
		}
		ch := s.changed
		s.mu.Unlock()
		t := time.NewTimer(AnnouncedFor)
		select {
		case <-ctx.Done():
			t.Stop()
			return ""
		case <-ch:
		case <-t.C: // an announcement may have expired
		}
		t.Stop()
	}
}

// candidates are the pods to try, the announced ones first (newest first:
// they listen already), then those the EndpointSlices list; s.mu held.
func (s *Service) candidates(now time.Time) []string {
	var ts []string
	for u, at := range s.told {
		if now.Sub(at) > AnnouncedFor || s.gone[u] {
			delete(s.told, u)
			continue
		}
		ts = append(ts, u)
	}
	slices.SortFunc(ts, func(a, b string) int { return s.told[b].Compare(s.told[a]) })
	for _, u := range s.listed {
		if !slices.Contains(ts, u) {
			ts = append(ts, u)
		}
	}
	return ts
}

// AnnouncedFor is how long a pod's announcement (Announce) is used at
// most, and only until a pod of the Service is seen ready: the time
// between its process listening and Knative finding it ready is about a
// second; a pod taken out since (draining, its process still listening)
// or gone (its address given to another pod) must not be tried.
const AnnouncedFor = 5 * time.Second

// announce records that a pod of the Service listens at base.
func (s *Service) announce(base string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.told == nil {
		s.told = map[string]time.Time{}
	}
	s.told[base] = now
	close(s.changed)
	s.changed = make(chan struct{})
}

// Linger is how long the pods are still followed after the last request
// that waited: an operator whose reconciles often take longer than After
// costs one watch, not a list and a watch per slow request.
const Linger = 30 * time.Second

// acquire starts following the pods for a waiting request (unless they
// still are); release lets them be followed for Linger after the last.
func (s *Service) acquire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users++
	s.uses++
	if s.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		s.listed, s.gone, s.ready, s.failed = nil, nil, false, false
		go s.follow(ctx)
	}
}

func (s *Service) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users > 0 {
		return
	}
	uses := s.uses
	time.AfterFunc(Linger, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.users == 0 && s.uses == uses && s.cancel != nil {
			s.cancel()
			s.cancel = nil
		}
	})
}

// follow lists and watches the Service's private EndpointSlices until
// ctx ends. It gives up (fail) when it may not, or the Service is not
// there; other errors are tried again every second.
func (s *Service) follow(ctx context.Context) {
	var port int64
	var err error
	for {
		if port, err = s.userPort(ctx); err == nil || !s.again(ctx, err) {
			break
		}
	}
	if err != nil {
		s.fail(ctx, err)
		return
	}
	res := s.dyn.Resource(endpointSlices).Namespace(s.key.Namespace)
	sel := metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + s.key.Name + ",networking.internal.knative.dev/serviceType=Private"}
	for ctx.Err() == nil {
		l, err := res.List(ctx, sel)
		if err != nil {
			if s.again(ctx, err) {
				continue
			}
			s.fail(ctx, err)
			return
		}
		slices := map[string]*unstructured.Unstructured{}
		for i := range l.Items {
			slices[l.Items[i].GetName()] = &l.Items[i]
		}
		s.publish(slices, port)
		wo := sel
		wo.ResourceVersion = l.GetResourceVersion()
		w, err := res.Watch(ctx, wo)
		if err != nil {
			if s.again(ctx, err) {
				continue
			}
			s.fail(ctx, err)
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
			s.publish(slices, port)
		}
		w.Stop()
	}
}

// again waits a second and says whether to try again after err: not when
// the hub may not read (Forbidden), the Service is gone (NotFound), or ctx
// ended.
func (s *Service) again(ctx context.Context, err error) bool {
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || ctx.Err() != nil {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Second):
		return true
	}
}

// userPort is the Service's container port (Knative's default 8080).
func (s *Service) userPort(ctx context.Context) (int64, error) {
	c, err := s.read(ctx, s.key)
	return c.port, err
}

// publish sets the targets from slices: the addresses of endpoints
// neither ready nor terminating, unless one is ready.
func (s *Service) publish(slices map[string]*unstructured.Unstructured, port int64) {
	var listed []string
	gone := map[string]bool{}
	ready := false
	for _, sl := range slices {
		eps, _, _ := unstructured.NestedSlice(sl.Object, "endpoints")
		for _, ep := range eps {
			m, _ := ep.(map[string]any)
			r, _, _ := unstructured.NestedBool(m, "conditions", "ready")
			term, _, _ := unstructured.NestedBool(m, "conditions", "terminating")
			addrs, _, _ := unstructured.NestedStringSlice(m, "addresses")
			if len(addrs) == 0 {
				continue
			}
			u := "http://" + net.JoinHostPort(addrs[0], strconv.FormatInt(port, 10))
			switch {
			case term:
				gone[u] = true
			case r:
				ready = true
			default:
				listed = append(listed, u)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed, s.gone, s.ready = listed, gone, ready
	if ready {
		// The announcements are spent: they were for the time before a pod
		// was ready. One kept would send to that pod directly once it is
		// taken out again (draining: its process still listens).
		s.told = nil
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// fail ends direct requests until the Service has not been followed for
// Linger (then the next request that waits tries again): they go through
// the route alone.
func (s *Service) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.log.V(1).Info("not following the Knative Service's starting pods; requests go through its address alone", "service", s.key.String(), "err", err.Error())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = true
	close(s.changed)
	s.changed = make(chan struct{})
}
