package operator

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/reconcileutil"
)

// ReasonForbidden is the reason of the Warning Event recorded on an object
// whose reconcile the API server refused for the operator's RBAC.
const ReasonForbidden = "Forbidden"

// forbiddenEvents records a Warning Event (ReasonForbidden) on the object
// whose reconcile failed because the API server refused the operator
// something (403): a missing rule otherwise shows only in the operator's
// log, and at zero nobody reads it. The error is returned as it was.
type forbiddenEvents struct {
	reconcile.Reconciler
	c    client.Client
	rec  reconcileutil.Recorder
	kind builder.Kind
}

func (f forbiddenEvents) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := f.Reconciler.Reconcile(ctx, req)
	var status apierrors.APIStatus
	if err == nil || !apierrors.IsForbidden(err) || !errors.As(err, &status) {
		return res, err
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(f.kind.GVK)
	if gerr := f.c.Get(ctx, req.NamespacedName, obj); gerr != nil {
		return res, err // gone, or unreadable too: the log has it
	}
	f.rec.Eventf(obj, nil, "Warning", ReasonForbidden, "Reconcile",
		"the API server refused the operator: %s (its RBAC lacks this: a +kubebuilder:rbac marker or a rule in its ClusterRole)", status.Status().Message)
	return res, err
}

// withForbiddenEvents wraps op's reconciler so that a refusal by RBAC is
// an Event on the object.
func (r *Runtime) withForbiddenEvents(op *builder.Controller) {
	if op.Reconciler == nil {
		return
	}
	if _, done := op.Reconciler.(forbiddenEvents); done {
		return
	}
	op.Reconciler = forbiddenEvents{Reconciler: op.Reconciler, c: r.client, rec: r.GetEventRecorder(op.Name), kind: op.Primary}
}
