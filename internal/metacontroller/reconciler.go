package metacontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/reconcileutil"
)

// Key prefixes. A request's name is a controller's name (the primary kind,
// CompositeController), "decorator/<name>" (a DecoratorController changed),
// "composite/<controller>/<parent>" or
// "decorator/<controller>/<resource.group>/<object>"; the namespace is the
// parent's. Kubernetes names never contain "/", so keys are unambiguous.
const (
	compositePrefix = "composite/"
	decoratorPrefix = "decorator/"
)

// CompositeKey is the request that syncs one parent of a CompositeController.
func CompositeKey(controller, namespace, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: compositePrefix + controller + "/" + name}}
}

// DecoratorKey is the request that syncs one object a DecoratorController decorates.
func DecoratorKey(controller string, d Decorated, namespace, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace,
		Name: decoratorPrefix + controller + "/" + d.GVR.GroupResource().String() + "/" + name}}
}

// Reconciler syncs parents with their hooks. It is a plain
// reconcile.Reconciler: opzero's builder runs it classic or serverless.
type Reconciler struct {
	Client   client.Client
	Config   *Config
	Hooks    *HookClient
	Recorder record.EventRecorder
	// OnChange is called when a CompositeController or DecoratorController
	// differs from the one the operator started with: the operator restarts
	// to watch what the new set names.
	OnChange func(reason string)
	// FieldManager owns what server-side apply writes (default "opzero-metacontroller").
	FieldManager string

	learning learning
	fields   statusFields
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer r.restartIfLearned()
	n := req.Name
	switch {
	case strings.HasPrefix(n, compositePrefix):
		ctl, parent, ok := strings.Cut(strings.TrimPrefix(n, compositePrefix), "/")
		c := r.find("CompositeController", ctl)
		if !ok || c == nil {
			return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("key %s: no CompositeController %q is loaded", req, ctl))
		}
		return r.syncComposite(ctx, c, req.Namespace, parent)
	case strings.HasPrefix(n, decoratorPrefix):
		parts := strings.SplitN(strings.TrimPrefix(n, decoratorPrefix), "/", 3)
		c := r.find("DecoratorController", parts[0])
		if len(parts) == 1 {
			return reconcile.Result{}, r.checkDecorator(ctx, parts[0], c)
		}
		if len(parts) != 3 || c == nil {
			return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("key %s: no DecoratorController %q is loaded", req, parts[0]))
		}
		for _, d := range c.Parents {
			if d.GVR.GroupResource().String() == parts[1] {
				return r.syncDecorator(ctx, c, d, req.Namespace, parts[2])
			}
		}
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("key %s: DecoratorController %s decorates no %s", req, parts[0], parts[1]))
	default:
		return reconcile.Result{}, r.checkComposite(ctx, n)
	}
}

func (r *Reconciler) find(kind, name string) *Controller {
	for _, c := range r.Config.Controllers {
		if c.Kind == kind && c.Name == name {
			return c
		}
	}
	return nil
}

// parentOf reads a parent; nil if it is gone.
func (r *Reconciler) parentOf(ctx context.Context, res Resource, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(res.GVK)
	if !res.Namespaced {
		ns = ""
	}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s %s: %w", res.GVK.Kind, name, err)
	}
	return u, nil
}

// finalizer keeps Metacontroller's finalizer on a live parent exactly when
// the controller has a finalize hook. It reports whether the parent is
// being deleted and still needs its finalize hook.
func (r *Reconciler) finalizer(ctx context.Context, c *Controller, parent *unstructured.Unstructured) (finalizing, done bool, err error) {
	f := c.Finalizer()
	has := false
	for _, x := range parent.GetFinalizers() {
		has = has || x == f
	}
	if parent.GetDeletionTimestamp() != nil {
		if has && c.Finalize == nil { // the finalize hook was removed: let go
			return true, true, r.removeFinalizer(ctx, parent, f)
		}
		return true, !has, nil
	}
	if c.Finalize != nil && !has {
		_, err := reconcileutil.EnsureFinalizer(ctx, r.Client, parent, f)
		return false, false, err
	}
	if c.Finalize == nil && has {
		return false, false, r.removeFinalizer(ctx, parent, f)
	}
	return false, false, nil
}

// hookFailed reports a failed hook call on the parent: the condition
// Synced=False (HookFailed, or HookAnswerInvalid for an answer that cannot
// be used) in its status; sync leaves the SyncError Event. Nothing else is
// changed.
func (r *Reconciler) hookFailed(ctx context.Context, c *Controller, parent *unstructured.Unstructured, err error) error {
	reason := ReasonHookFailed
	var bad *BadAnswer
	if errors.As(err, &bad) {
		reason = ReasonHookAnswerInvalid
	}
	return r.failed(ctx, parent, reason, fmt.Sprintf("%s %s: %v", c.Kind, c.Name, err), err)
}

func (r *Reconciler) resync(c *Controller, after float64) reconcile.Result {
	var d time.Duration
	if after > 0 {
		d = time.Duration(after * float64(time.Second))
	}
	if p := time.Duration(c.ResyncPeriodSeconds) * time.Second; p > 0 && (d == 0 || p < d) {
		d = p
	}
	return reconcile.Result{RequeueAfter: d}
}

func (r *Reconciler) fieldManager() string {
	if r.FieldManager != "" {
		return r.FieldManager
	}
	return "opzero-metacontroller"
}

// checkComposite compares a CompositeController with the one loaded at start.
func (r *Reconciler) checkComposite(ctx context.Context, name string) error {
	return r.check(ctx, "CompositeController", name, r.find("CompositeController", name))
}

func (r *Reconciler) checkDecorator(ctx context.Context, name string, c *Controller) error {
	return r.check(ctx, "DecoratorController", name, c)
}
