package adopt_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opzero/opzero/internal/adopt"
)

// started adopts a real controller-runtime controller watching ConfigMaps
// through the shim cache, with GenerationChangedPredicate and a handler
// that records the kind of each event, and starts it.
func started(t *testing.T) (*adopt.Controller, *[]string, *[]reconcile.Request) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	var mu sync.Mutex
	var seen []string
	var reconciled []reconcile.Request
	r := reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
		reconciled = append(reconciled, req)
		return reconcile.Result{}, nil
	})
	c, err := controller.NewUnmanaged("t", controller.Options{Reconciler: r, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	cache := adopt.NewCache(nil, scheme)
	h := handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, "create initial="+map[bool]string{true: "true", false: "false"}[e.IsInInitialList])
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: e.Object.GetName()}})
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, "update from "+e.ObjectOld.GetResourceVersion())
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: e.ObjectNew.GetName()}})
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, "delete")
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: e.Object.GetName()}})
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: e.Object.GetName()}}) // once in the result
		},
	}
	if err := c.Watch(source.Kind(cache, client.Object(&corev1.ConfigMap{}), handler.EventHandler(h), predicate.GenerationChangedPredicate{})); err != nil {
		t.Fatal(err)
	}
	var outside []reconcile.Request
	a, ok, err := adopt.Adopt(c, cache, func(r reconcile.Request, _ time.Duration) { outside = append(outside, r) })
	if err != nil || !ok {
		t.Fatalf("Adopt = %v, %v", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := a.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller stopped with %v", err)
		}
		if len(reconciled) != 0 || len(outside) != 0 {
			t.Errorf("the controller's own workers reconciled %v / requests escaped %v: want none", reconciled, outside)
		}
	})
	return a, &seen, &reconciled
}

func cm(rv string, gen int64) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u", ResourceVersion: rv, Generation: gen}}
}

func TestDeliverPlaysEventsThroughHandlersAndPredicates(t *testing.T) {
	a, seen, _ := started(t)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	want := reconcile.Request{NamespacedName: types.NamespacedName{Name: "x"}}
	steps := []struct {
		typ   adopt.EventType
		obj   *corev1.ConfigMap
		reqs  int
		event string
	}{
		{adopt.Updated, cm("1", 1), 1, "create initial=true"}, // never seen: a create in the initial list
		{adopt.Updated, cm("2", 1), 0, ""},                    // same generation: the predicate drops it
		{adopt.Updated, cm("3", 2), 1, "update from 2"},       // old = the last one seen
		{adopt.Deleted, cm("3", 2), 1, "delete"},
		{adopt.Updated, cm("4", 3), 1, "create initial=true"}, // forgotten after the delete
		{adopt.Added, cm("5", 1), 1, "create initial=false"},
	}
	for i, s := range steps {
		n := len(*seen)
		reqs := a.Deliver(gvk, s.typ, s.obj)
		if len(reqs) != s.reqs || (s.reqs == 1 && reqs[0] != want) {
			t.Fatalf("step %d (%s rv %s): requests %v, want %d of %v", i, s.typ, s.obj.ResourceVersion, reqs, s.reqs, want)
		}
		got := strings.Join((*seen)[n:], ";")
		if got != s.event {
			t.Fatalf("step %d (%s rv %s): handler saw %q, want %q", i, s.typ, s.obj.ResourceVersion, got, s.event)
		}
	}
	if reqs := a.Deliver(corev1.SchemeGroupVersion.WithKind("Secret"), adopt.Added, &corev1.Secret{}); reqs != nil {
		t.Fatalf("a kind no source watches: %v, want nothing", reqs)
	}
}

func TestAdoptLeavesOtherRunnables(t *testing.T) {
	_, ok, err := adopt.Adopt(manager.RunnableFunc(func(context.Context) error { return nil }), nil, nil)
	if ok || err != nil {
		t.Fatalf("a plain Runnable: ok %v err %v, want not a controller", ok, err)
	}
}

// TestSelfMappedKind: a controller built without For, whose ConfigMaps
// are watched with EnqueueRequestForObject and Secrets mapped to a fixed
// key, reconciles ConfigMaps; with two kinds that map to themselves, the
// kind cannot be told and none is chosen.
func TestSelfMappedKind(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	adopted := func(kinds ...client.Object) *adopt.Controller {
		r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
		c, err := controller.NewUnmanaged("forless", controller.Options{Reconciler: r, SkipNameValidation: ptr.To(true)})
		if err != nil {
			t.Fatal(err)
		}
		cache := adopt.NewCache(nil, scheme)
		for _, k := range kinds {
			if err := c.Watch(source.Kind(cache, k, handler.EventHandler(&handler.EnqueueRequestForObject{}))); err != nil {
				t.Fatal(err)
			}
		}
		fixed := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "a", Name: "fixed"}}}
		})
		if err := c.Watch(source.Kind(cache, client.Object(&corev1.Secret{}), fixed)); err != nil {
			t.Fatal(err)
		}
		return startAdopted(t, c, cache)
	}
	if _, ok := adopted(&corev1.ConfigMap{}).PrimaryKind(); ok {
		t.Fatal("a controller without For has a For kind")
	}
	if gk, ok := adopted(&corev1.ConfigMap{}).SelfMappedKind(); !ok || gk.Kind != "ConfigMap" {
		t.Errorf("SelfMappedKind = %v, %v; want ConfigMap", gk, ok)
	}
	if gk, ok := adopted(&corev1.ConfigMap{}, &corev1.Pod{}).SelfMappedKind(); ok {
		t.Errorf("two self-mapped kinds: SelfMappedKind = %v, want none", gk)
	}
}

// TestForeignCacheIsServed: a controller whose source watches through a
// cache other than the adopted one (the project's own, cache.New, here
// metadata-only) starts at once without touching that cache, and its
// events are delivered through the adopted one like any other kind's.
func TestForeignCacheIsServed(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	c, err := controller.NewUnmanaged("targets", controller.Options{Reconciler: r, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := adopt.NewCache(nil, scheme), projectCache{} // theirs stands for the project's cache.New; any call on it panics
	if err := c.Watch(source.Kind(ours, client.Object(&corev1.Secret{}), handler.EventHandler(&handler.EnqueueRequestForObject{}))); err != nil {
		t.Fatal(err)
	}
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	toOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "a", Name: o.GetLabels()["owner"]}}}
	})
	if err := c.Watch(source.Kind(theirs, client.Object(meta), toOwner)); err != nil {
		t.Fatal(err)
	}
	a, ok, err := adopt.Adopt(c, ours, func(reconcile.Request, time.Duration) {})
	if err != nil || !ok {
		t.Fatalf("Adopt = %v, %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done, err := a.Start(ctx)
	if err != nil {
		t.Fatalf("Start = %v, want the foreign cache's source served", err)
	}
	defer func() { cancel(); <-done }()
	cm := &metav1.PartialObjectMetadata{TypeMeta: meta.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "t", Labels: map[string]string{"owner": "b"}}}
	reqs := a.Deliver(corev1.SchemeGroupVersion.WithKind("ConfigMap"), adopt.Added, cm)
	if want := (reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "b"}}); len(reqs) != 1 || reqs[0] != want {
		t.Errorf("Deliver of a ConfigMap = %v, want %v through the project's handler", reqs, want)
	}
	if _, ok := a.Cache().Lookup(corev1.SchemeGroupVersion.WithKind("ConfigMap")); !ok {
		t.Error("the ConfigMaps are not among the adopted cache's kinds: the hub would not be asked for them")
	}
}

// projectCache stands for a cache a project builds with cache.New.
type projectCache struct{ crcache.Cache }
