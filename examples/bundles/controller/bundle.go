// Package controller is the bundles test project's controller: it copies
// a Bundle's source (a ConfigMap key of the trust namespace) into a
// ConfigMap of the Bundle's name in every namespace. It is For-less
// (Watches of its Bundles with EnqueueRequestForObject), reads its
// sources through the manager's namespace-restricted cache, and watches
// its targets metadata-only through a cache it builds itself.
package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/opzero/opzero/examples/bundles/api/v1alpha1"
)

// +kubebuilder:rbac:groups=bundles.opzero.dev,resources=bundles,verbs=get;list;watch
// +kubebuilder:rbac:groups=bundles.opzero.dev,resources=bundles/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// Reconciler distributes one Bundle.
type Reconciler struct {
	Client         client.Client
	TrustNamespace string
	// Targets is the project's own cache of its targets (cache.New),
	// metadata only.
	Targets cache.Cache
}

// Reconcile writes the Bundle's target in every namespace.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var b v1alpha1.Bundle
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // its targets go with it (owner references)
	}
	var src corev1.ConfigMap
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.TrustNamespace, Name: b.Spec.Source.ConfigMap}, &src); err != nil {
		return reconcile.Result{}, fmt.Errorf("source %s/%s: %w", r.TrustNamespace, b.Spec.Source.ConfigMap, err)
	}
	data, ok := src.Data[b.Spec.Source.Key]
	if !ok {
		return reconcile.Result{}, fmt.Errorf("source %s/%s has no key %q", r.TrustNamespace, b.Spec.Source.ConfigMap, b.Spec.Source.Key)
	}
	key := b.Spec.TargetKey
	if key == "" {
		key = b.Spec.Source.Key
	}
	var nss corev1.NamespaceList
	if err := r.Client.List(ctx, &nss); err != nil {
		return reconcile.Result{}, err
	}
	n := 0
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			continue
		}
		t := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: b.Name}}
		_, err := controllerutil.CreateOrUpdate(ctx, r.Client, t, func() error {
			if t.Labels == nil {
				t.Labels = map[string]string{}
			}
			t.Labels[v1alpha1.GroupVersion.Group+"/bundle"] = b.Name
			t.Data = map[string]string{key: data}
			return controllerutil.SetControllerReference(&b, t, r.Client.Scheme())
		})
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) { // a namespace being deleted
			continue
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		n++
	}
	if b.Status.Targets != n || b.Status.ObservedGeneration != b.Generation {
		b.Status.Targets, b.Status.ObservedGeneration = n, b.Generation
		if err := r.Client.Status().Update(ctx, &b); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// SetupWithManager registers the controller: no For; its Bundles
// (GenerationChanged: its own status writes do not reconcile), the trust
// namespace's ConfigMaps (the manager's cache holds no others), every
// Namespace (a new one gets its targets) and its targets, metadata only,
// from its own cache, by controller owner.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return r.bundles(ctx, func(v1alpha1.Bundle) bool { return true })
	})
	bySource := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		if o.GetNamespace() != r.TrustNamespace {
			return nil
		}
		return r.bundles(ctx, func(b v1alpha1.Bundle) bool { return b.Spec.Source.ConfigMap == o.GetName() })
	})
	target := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("bundle").
		Watches(&v1alpha1.Bundle{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, bySource).
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		WatchesRawSource(source.Kind(r.Targets, client.Object(target),
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.Bundle{}, handler.OnlyControllerOwner()))).
		Complete(r)
}

func (r *Reconciler) bundles(ctx context.Context, keep func(v1alpha1.Bundle) bool) []reconcile.Request {
	var l v1alpha1.BundleList
	if err := r.Client.List(ctx, &l); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing Bundles")
		return nil
	}
	var out []reconcile.Request
	for _, b := range l.Items {
		if keep(b) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: b.Name}})
		}
	}
	return out
}
