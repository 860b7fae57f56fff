package reconcileutil

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/genskip"
)

// UpdateStatus applies mutate to obj and writes its status subresource. On
// a 409 Conflict it reads the object again, re-applies mutate and retries
// (client-go's retry.DefaultRetry); any other error is returned at once.
func UpdateStatus(ctx context.Context, c client.Client, obj client.Object, mutate func() error) error {
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
		}
		first = false
		if err := mutate(); err != nil {
			return err
		}
		return c.Status().Update(ctx, obj)
	})
	if err != nil {
		return fmt.Errorf("writing status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// ObservedGeneration reads status.observedGeneration of any object.
func ObservedGeneration(obj client.Object) (int64, bool) { return genskip.ObservedGeneration(obj) }

// Ready is the condition type SetReady writes.
const Ready = "Ready"

// SetReady sets the Ready condition for generation gen; its
// lastTransitionTime changes only when its status does.
func SetReady(conds *[]metav1.Condition, gen int64, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: Ready, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}
