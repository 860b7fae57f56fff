// Package controller is the Gadget project's reconciler (kubebuilder's
// internal/controller): a ConfigMap per Gadget with its length and color.
package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v2 "github.com/opzero/opzero/internal/manifests/testdata/gadgets/api/v2"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete

// Reconciler makes the ConfigMap <gadget>-gadget.
type Reconciler struct{ client.Client }

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := &v2.Gadget{}
	if err := r.Get(ctx, req.NamespacedName, g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.Name + "-gadget", Namespace: g.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Data = map[string]string{"length": fmt.Sprint(g.Spec.Length), "color": g.Spec.Color}
		return controllerutil.SetControllerReference(g, cm, r.Scheme())
	})
	return ctrl.Result{}, err
}

// SetupWithManager adds the controller to mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v2.Gadget{}).Owns(&corev1.ConfigMap{}).Named("gadgets").Complete(r)
}
