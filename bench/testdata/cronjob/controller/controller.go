// Package controller is the CronJob-style project's reconciler, in the
// shape of kubebuilder's CronJob tutorial: it makes the child of the last
// schedule (a ConfigMap standing in for its Job), lists its children and
// writes what it found in status.active, every reconcile, as the tutorial
// does (r.Status().Update). It asks for no requeue: with nothing changing,
// nothing but a sweep wakes it. CronJobReconciler writes no
// observedGeneration (the tutorial's status has none);
// ObservedCronJobReconciler writes it, the bench's baseline.
package controller

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/opzero/opzero/bench/testdata/cronjob/api/v1"
)

// OwnerLabel names a child's CronJob (the tutorial indexes a field; a
// label selects the same children).
const OwnerLabel = "tutorial.opzero.dev/cronjob"

// +kubebuilder:rbac:groups=tutorial.opzero.dev,resources=cronjobs;observedcronjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=tutorial.opzero.dev,resources=cronjobs/status;observedcronjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete

// children makes owner's child of its last schedule if missing and
// returns the names of its children.
func children(ctx context.Context, c client.Client, owner client.Object) ([]string, error) {
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: owner.GetName() + "-job", Namespace: owner.GetNamespace(),
		Labels: map[string]string{OwnerLabel: owner.GetName()}}}
	if err := controllerutil.SetControllerReference(owner, child, c.Scheme()); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, child); client.IgnoreAlreadyExists(err) != nil {
		return nil, err
	}
	var l corev1.ConfigMapList
	if err := c.List(ctx, &l, client.InNamespace(owner.GetNamespace()), client.MatchingLabels{OwnerLabel: owner.GetName()}); err != nil {
		return nil, err
	}
	var names []string
	for _, cm := range l.Items {
		names = append(names, cm.Name)
	}
	slices.Sort(names)
	return names, nil
}

// CronJobReconciler reconciles CronJobs (no observedGeneration).
type CronJobReconciler struct{ client.Client }

// Reconcile implements reconcile.Reconciler.
func (r *CronJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cj := &v1.CronJob{}
	if err := r.Get(ctx, req.NamespacedName, cj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	active, err := children(ctx, r.Client, cj)
	if err != nil {
		return ctrl.Result{}, err
	}
	cj.Status.Active = active
	return ctrl.Result{}, r.Status().Update(ctx, cj)
}

// SetupWithManager adds the controller to mgr.
func (r *CronJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1.CronJob{}).Owns(&corev1.ConfigMap{}).Named("cronjob").Complete(r)
}

// ObservedCronJobReconciler reconciles ObservedCronJobs, writing
// status.observedGeneration.
type ObservedCronJobReconciler struct{ client.Client }

// Reconcile implements reconcile.Reconciler.
func (r *ObservedCronJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cj := &v1.ObservedCronJob{}
	if err := r.Get(ctx, req.NamespacedName, cj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	active, err := children(ctx, r.Client, cj)
	if err != nil {
		return ctrl.Result{}, err
	}
	cj.Status.Active, cj.Status.ObservedGeneration = active, cj.Generation
	return ctrl.Result{}, r.Status().Update(ctx, cj)
}

// SetupWithManager adds the controller to mgr.
func (r *ObservedCronJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1.ObservedCronJob{}).Owns(&corev1.ConfigMap{}).Named("observedcronjob").Complete(r)
}
