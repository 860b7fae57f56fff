package reconcileutil

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds name to obj's finalizers unless present. obj is
// updated in place with the server's answer.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) (added bool, err error) {
	if controllerutil.ContainsFinalizer(obj, name) {
		return false, nil
	}
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, name)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("adding finalizer %s to %s: %w", name, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// HandleDeletion, when obj is being deleted and still carries finalizer
// name, runs cleanup and then removes the finalizer. It reports whether obj
// is being deleted. A cleanup error keeps the finalizer (retry later); an
// object already gone counts as done.
func HandleDeletion(ctx context.Context, c client.Client, obj client.Object, name string, cleanup func(context.Context) error) (deleting bool, err error) {
	if obj.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	if !controllerutil.ContainsFinalizer(obj, name) {
		return true, nil
	}
	if cleanup != nil {
		if err := cleanup(ctx); err != nil {
			return true, fmt.Errorf("cleanup of %s before removing finalizer %s: %w", client.ObjectKeyFromObject(obj), name, err)
		}
	}
	if err := removeFinalizer(ctx, c, obj, name); err != nil {
		return true, err
	}
	return true, nil
}

// removeFinalizer removes name with a JSON patch guarded by a test of the
// finalizer list, so a concurrent change is a conflict, not a lost update.
func removeFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	cur := obj.GetFinalizers()
	var keep []string
	for _, f := range cur {
		if f != name {
			keep = append(keep, f)
		}
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": cur},
		{"op": "replace", "path": "/metadata/finalizers", "value": keep},
	})
	err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing finalizer %s from %s: %w", name, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
