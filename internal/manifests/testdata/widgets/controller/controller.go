// Package controller is the Widget project's reconciler (kubebuilder's
// internal/controller): a ConfigMap per Widget with its size and color.
package controller

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/opzero/opzero/internal/manifests/testdata/widgets/api/v1"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete

// Reconciler makes the ConfigMap <widget>-widget.
type Reconciler struct{ client.Client }

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := &v1.Widget{}
	if err := r.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.Name + "-widget", Namespace: w.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Data = map[string]string{"size": fmt.Sprint(w.Spec.Size), "color": w.Spec.Color}
		return controllerutil.SetControllerReference(w, cm, r.Scheme())
	})
	return ctrl.Result{}, err
}

// SetupWithManager adds the controller to mgr. With WIDGETS_PREDICATES
// set (a test), its watches filter as many projects' do: Widgets by
// generation, ConfigMaps by a label change or a function of its own,
// Secrets by type of change (no update: predicate.Funcs' UpdateFunc); and
// a channel of its own feeds it too (source.Channel).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if os.Getenv("WIDGETS_UNSERVED") != "" {
		return r.setupUnserved(mgr)
	}
	if os.Getenv("WIDGETS_PREDICATES") != "" {
		mine := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetAnnotations()["widgets"] != "" })
		return ctrl.NewControllerManagedBy(mgr).
			For(&v1.Widget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Owns(&corev1.ConfigMap{}, builder.WithPredicates(predicate.Or(predicate.LabelChangedPredicate{}, mine))).
			Owns(&corev1.Secret{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
			WatchesRawSource(source.Channel(make(chan event.GenericEvent), &handler.EnqueueRequestForObject{})).
			Named("widgets").Complete(r)
	}
	return ctrl.NewControllerManagedBy(mgr).For(&v1.Widget{}).Owns(&corev1.ConfigMap{}).Named("widgets").Complete(r)
}
