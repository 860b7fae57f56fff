package metacontroller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ReasonSyncError is the reason of the Warning Event a failed sync leaves on
// its parent (the decorated object), as Metacontroller writes it
// (metacontroller pkg/events: "SyncError", message "Sync error: ...").
// Tools written for Metacontroller wait on it (webhook-auth's test.sh:
// `kubectl get events --field-selector reason=SyncError`).
const ReasonSyncError = "SyncError"

// The reasons of the condition Synced=False, opzero's own (Metacontroller
// writes no condition). They also lead the SyncError Event's message.
const (
	ReasonHookFailed        = "HookFailed"        // the hook could not be called or answered an error
	ReasonHookAnswerInvalid = "HookAnswerInvalid" // its answer could not be used (BadAnswer)
	ReasonApplyForbidden    = "ApplyForbidden"    // the API server refused a child (Forbidden)
	ReasonRelatedUnreadable = "RelatedUnreadable" // what customize named could not be read
)

// syncFailure is a failed sync that has a reason of its own (the condition's).
type syncFailure struct {
	reason, msg string
	err         error
}

func (f *syncFailure) Error() string { return f.reason + ": " + f.msg }
func (f *syncFailure) Unwrap() error { return f.err }

// failed sets Synced=False with reason and msg on the parent and returns
// the failure that the SyncError Event will name.
func (r *Reconciler) failed(ctx context.Context, parent *unstructured.Unstructured, reason, msg string, err error) error {
	f := &syncFailure{reason: reason, msg: msg, err: err}
	if werr := r.setCondition(ctx, parent, "False", reason, msg); werr != nil {
		return errors.Join(f, werr)
	}
	return f
}

// syncError leaves Metacontroller's Warning Event SyncError on the parent
// for a sync that failed, as Metacontroller does for every error of a
// sync, except the two it swallows: the parent is gone, or it changed
// meanwhile (a conflict: the change's own event syncs it again).
func (r *Reconciler) syncError(parent *unstructured.Unstructured, err error) {
	if err == nil || r.Recorder == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return
	}
	r.Recorder.Event(parent, "Warning", ReasonSyncError, fmt.Sprintf("Sync error: %v", err))
}
