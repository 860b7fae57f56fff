package adopt_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opzero/opzero/internal/adopt"
)

// TestForeignKinds: the kinds a controller watches through a cache the
// project built are named before Start moves them (a metadata-only
// ConfigMap by its TypeMeta, a typed Pod by the scheme); those on the
// adopted cache are not.
func TestForeignKinds(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	c, err := controller.NewUnmanaged("foreign-kinds", controller.Options{Reconciler: r, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := adopt.NewCache(nil, scheme), projectCache{}
	h := handler.EventHandler(&handler.EnqueueRequestForObject{})
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	for _, src := range []source.Source{
		source.Kind(ours, client.Object(&corev1.Secret{}), h),
		source.Kind(theirs, client.Object(meta), h),
		source.Kind(theirs, client.Object(&corev1.Pod{}), h),
	} {
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
	}
	a, ok, err := adopt.Adopt(c, ours, nil)
	if err != nil || !ok {
		t.Fatalf("Adopt = %v, %v", ok, err)
	}
	got := a.ForeignKinds(scheme)
	want := []schema.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}, {Version: "v1", Kind: "Pod"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ForeignKinds = %v, want %v", got, want)
	}
}

// TestForeignSourcesOwner: a foreign source whose handler is
// EnqueueRequestForOwner names the owner kind (and whether only the
// controller owner counts); one with another handler names none.
func TestForeignSourcesOwner(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	c, err := controller.NewUnmanaged("foreign-owner", controller.Options{Reconciler: r, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := adopt.NewCache(nil, scheme), projectCache{}
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	for _, src := range []source.Source{
		source.Kind(theirs, client.Object(meta), handler.EnqueueRequestForOwner(scheme, nil, &appsv1.Deployment{}, handler.OnlyControllerOwner())),
		source.Kind(theirs, client.Object(&corev1.Secret{}), handler.EnqueueRequestForOwner(scheme, nil, &appsv1.Deployment{})),
		source.Kind(theirs, client.Object(&corev1.Pod{}), handler.EventHandler(&handler.EnqueueRequestForObject{})),
	} {
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
	}
	a, ok, err := adopt.Adopt(c, ours, nil)
	if err != nil || !ok {
		t.Fatalf("Adopt = %v, %v", ok, err)
	}
	got := a.ForeignSources(scheme)
	deploy := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	if len(got) != 3 {
		t.Fatalf("ForeignSources = %v, want 3", got)
	}
	for i, want := range []struct {
		kind       string
		owner      *schema.GroupKind
		controller bool
	}{{"ConfigMap", &deploy, true}, {"Secret", &deploy, false}, {"Pod", nil, false}} {
		g := got[i]
		if g.GVK.Kind != want.kind || (g.Owner == nil) != (want.owner == nil) || (g.Owner != nil && *g.Owner != *want.owner) || g.OnlyController != want.controller {
			t.Errorf("ForeignSources[%d] = %s owner %v controller %v, want %s owner %v controller %v", i, g.GVK.Kind, g.Owner, g.OnlyController, want.kind, want.owner, want.controller)
		}
	}
}
