// Package controller is the ConfigWatcher reconciler, written exactly as for
// a controller-runtime manager: a client.Client, Status().Update, an
// EventRecorder. opzero runs it unchanged, classic or serverless.
package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/reconcileutil"
)

// What the reconciler needs beyond the kinds it is built with, for `opzero
// manifests` (which adds those itself: ConfigWatchers and their status,
// ConfigMaps, Events): it lists and deletes the selected pods.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;delete

// ConfigWatcherReconciler restarts the pods a ConfigWatcher selects when its
// ConfigMap changes.
type ConfigWatcherReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Reconcile compares the ConfigMap's resourceVersion with the one last acted
// on. The first sight of a ConfigMap only records it (the book restarts on
// change); a different version deletes the selected pods so their
// ReplicaSet brings them back with the new configuration.
func (r *ConfigWatcherReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1.ConfigWatcher{}
	if err := r.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: cw.Namespace, Name: cw.Spec.ConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		// Its add event will bring us back: no retry loop.
		return reconcile.Result{}, r.writeStatus(ctx, cw, func(s *v1.ConfigWatcherStatus) {
			reconcileutil.SetReady(&s.Conditions, cw.Generation, metav1.ConditionFalse, "ConfigMapNotFound",
				fmt.Sprintf("ConfigMap %s not found in %s", cw.Spec.ConfigMap, cw.Namespace))
		})
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading ConfigMap %s: %w", cw.Spec.ConfigMap, err)
	}
	restarted := 0
	changed := cw.Status.ConfigMapVersion != "" && cw.Status.ConfigMapVersion != cm.ResourceVersion
	if changed {
		if restarted, err = r.restartPods(ctx, cw); err != nil {
			return reconcile.Result{}, err
		}
		log.FromContext(ctx).Info("restarted pods", "configWatcher", req.String(), "pods", restarted)
		r.Recorder.Eventf(cw, nil, corev1.EventTypeNormal, "Restarted", "RestartPods",
			"ConfigMap %s changed (resourceVersion %s): restarted %d pod(s) matching %v", cm.Name, cm.ResourceVersion, restarted, cw.Spec.PodSelector)
	}
	now := r.now()
	return reconcile.Result{}, r.writeStatus(ctx, cw, func(s *v1.ConfigWatcherStatus) {
		if changed {
			s.Restarts++
			s.LastRestartTime = &now
		}
		s.ConfigMapVersion = cm.ResourceVersion
		reconcileutil.SetReady(&s.Conditions, cw.Generation, metav1.ConditionTrue, "Watching",
			fmt.Sprintf("watching ConfigMap %s", cm.Name))
	})
}

// restartPods deletes the pods the selector matches; one already gone is fine.
func (r *ConfigWatcherReconciler) restartPods(ctx context.Context, cw *v1.ConfigWatcher) (int, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(cw.Namespace), client.MatchingLabels(cw.Spec.PodSelector)); err != nil {
		return 0, fmt.Errorf("listing pods matching %v: %w", cw.Spec.PodSelector, err)
	}
	n := 0
	for i := range pods.Items {
		if err := r.Delete(ctx, &pods.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting pod %s: %w", pods.Items[i].Name, err)
		}
		n++
	}
	return n, nil
}

// writeStatus applies mutate and writes the status, retrying on conflict
// (mutate is re-applied to a freshly read object).
// An unchanged status is not written: no write, no conflict on a stale
// cache, no update event.
func (r *ConfigWatcherReconciler) writeStatus(ctx context.Context, cw *v1.ConfigWatcher, mutate func(*v1.ConfigWatcherStatus)) error {
	next := cw.Status.DeepCopy()
	mutate(next)
	next.ObservedGeneration = cw.Generation
	if equality.Semantic.DeepEqual(*next, cw.Status) {
		return nil
	}
	return reconcileutil.UpdateStatus(ctx, r.Client, cw, func() error {
		mutate(&cw.Status)
		cw.Status.ObservedGeneration = cw.Generation
		return nil
	})
}

func (r *ConfigWatcherReconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

// ConfigMapToConfigWatchers maps a ConfigMap to the ConfigWatchers in its
// namespace that watch it. c reads from the API server in serverless mode.
func ConfigMapToConfigWatchers(ctx context.Context, c client.Reader, cm client.Object) ([]reconcile.Request, error) {
	list := &v1.ConfigWatcherList{}
	if err := c.List(ctx, list, client.InNamespace(cm.GetNamespace())); err != nil {
		return nil, fmt.Errorf("listing ConfigWatchers for ConfigMap %s: %w", client.ObjectKeyFromObject(cm), err)
	}
	var out []reconcile.Request
	for _, cw := range list.Items {
		if cw.Spec.ConfigMap == cm.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cw)})
		}
	}
	return out, nil
}
