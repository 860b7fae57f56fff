package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
)

// The soak's finalizers: the parent's guards its child, the child's is
// removed by the parent's reconcile before the parent goes.
const (
	parentFinalizer = "soak.opzero.dev/children"
	childFinalizer  = "soak.opzero.dev/owner"
)

// wakeState is what a soak object's status.configMapVersion records of its
// RequeueAfter: "gen=<generation> due=<unix ms> woke=<unix ms>" (woke 0
// until a reconcile at or after due).
type wakeState struct {
	Gen       int64
	Due, Woke time.Time
}

func (w wakeState) String() string {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	return fmt.Sprintf("gen=%d due=%d woke=%d", w.Gen, ms(w.Due), ms(w.Woke))
}

// parseWakeState reads wakeState.String; anything else is the zero state.
func parseWakeState(s string) wakeState {
	var w wakeState
	var due, woke int64
	if _, err := fmt.Sscanf(s, "gen=%d due=%d woke=%d", &w.Gen, &due, &woke); err != nil {
		return wakeState{}
	}
	w.Due = time.UnixMilli(due)
	if woke != 0 {
		w.Woke = time.UnixMilli(woke)
	}
	return w
}

// childName is the soak object's child ConfigMap.
func childName(parent string) string { return parent + "-child" }

// soak reconciles as an operator with a child and durable time would:
//
//   - being deleted: the child's finalizer removed, the child deleted, then
//     the parent's finalizer removed;
//   - else the parent's finalizer, the child ConfigMap (controller owner
//     reference, finalizer, data.generation = the parent's generation);
//   - with spec.podSelector.wake = a duration: a new generation records
//     due = now + wake in status and asks RequeueAfter wake (the want is
//     appended to $TESTOP_WAKES); a reconcile at or after due records woke;
//     one before due asks RequeueAfter for the rest (appended again).
//
// The engine writes status.observedGeneration (TESTOP_SOAK turns it on).
func (r *scripted) soak(ctx context.Context, cw *v1.ConfigWatcher) (reconcile.Result, error) {
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: childName(cw.Name), Namespace: cw.Namespace}}
	if cw.DeletionTimestamp != nil {
		if !controllerutil.ContainsFinalizer(cw, parentFinalizer) {
			return reconcile.Result{}, nil
		}
		err := r.Get(ctx, client.ObjectKeyFromObject(child), child)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return reconcile.Result{}, err
		default:
			if controllerutil.RemoveFinalizer(child, childFinalizer) {
				if err := r.Update(ctx, child); client.IgnoreNotFound(err) != nil {
					return reconcile.Result{}, err
				}
			}
			if err := r.Delete(ctx, child); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
		controllerutil.RemoveFinalizer(cw, parentFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(r.Update(ctx, cw))
	}
	if controllerutil.AddFinalizer(cw, parentFinalizer) {
		if err := r.Update(ctx, cw); err != nil {
			return reconcile.Result{}, err
		}
	}
	gen := strconv.FormatInt(cw.Generation, 10)
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, child, func() error {
		controllerutil.AddFinalizer(child, childFinalizer)
		child.Data = map[string]string{"generation": gen}
		return controllerutil.SetControllerReference(cw, child, r.Scheme())
	}); err != nil {
		return reconcile.Result{}, err
	}
	wake, err := time.ParseDuration(cw.Spec.PodSelector["wake"])
	if err != nil || wake <= 0 {
		return reconcile.Result{}, nil
	}
	st, now := parseWakeState(cw.Status.ConfigMapVersion), time.Now()
	switch {
	case st.Gen != cw.Generation:
		// The due time as status keeps it (milliseconds), so a later
		// reconcile that asks for the rest asks for the same instant.
		st = wakeState{Gen: cw.Generation, Due: time.UnixMilli(now.Add(wake).UnixMilli())}
		cw.Status.ConfigMapVersion = st.String()
		if err := r.Status().Update(ctx, cw); err != nil {
			return reconcile.Result{}, err
		}
		appendWant(cw, st.Due)
		return reconcile.Result{RequeueAfter: st.Due.Sub(now)}, nil
	case !st.Woke.IsZero():
		return reconcile.Result{}, nil
	case now.Before(st.Due):
		// Recorded again: a SIGKILL between the status write above and
		// its appendWant leaves the due in status only, and this is then
		// the first reconcile to ask for it.
		appendWant(cw, st.Due)
		return reconcile.Result{RequeueAfter: st.Due.Sub(now)}, nil
	}
	st.Woke = now
	cw.Status.ConfigMapVersion = st.String()
	return reconcile.Result{}, r.Status().Update(ctx, cw)
}

// appendWant adds "want <ns/name> <pid> <due unix nanos>" to $TESTOP_WAKES.
func appendWant(cw *v1.ConfigWatcher, due time.Time) {
	f := os.Getenv("TESTOP_WAKES")
	if f == "" {
		return
	}
	fd, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer fd.Close()
	fmt.Fprintf(fd, "want %s %d %d\n", strings.Join([]string{cw.Namespace, cw.Name}, "/"), os.Getpid(), due.UnixNano())
}
