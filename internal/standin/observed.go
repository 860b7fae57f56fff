package standin

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WriteObservedGeneration records that generation g of the object at key
// was reconciled, with a merge patch of the status subresource, retried on
// conflict. Both engines call it after a successful reconcile, and both
// treat its failure as a failed reconcile (retried with backoff). g <= 0
// (the reconcile never read the object) and a deleted object are no-ops.
// ctx should be the reconcile's, so that the write's version is recorded.
func WriteObservedGeneration(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey, g int64) error {
	if g <= 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"observedGeneration": g}})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(key.Namespace)
		u.SetName(key.Name)
		return c.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
