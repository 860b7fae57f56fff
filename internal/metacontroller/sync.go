package metacontroller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// syncComposite is one sync of a CompositeController's parent: call the sync
// (or finalize) hook with the parent and its children, make the children
// what it answers, write the status it answers.
func (r *Reconciler) syncComposite(ctx context.Context, c *Controller, ns, name string) (reconcile.Result, error) {
	parent, err := r.parentOf(ctx, c.Parents[0].Resource, ns, name)
	if err != nil || parent == nil {
		return reconcile.Result{}, err // gone: the garbage collector deletes its children
	}
	if !c.Parents[0].matches(parent) {
		return reconcile.Result{}, nil // not (or no longer) selected by parentResource.labelSelector: left alone
	}
	return r.sync(ctx, c, parent, func(ctx context.Context, ep Endpoint, in hookInput) (hookAnswer, error) {
		req := CompositeSyncRequest{Controller: c.Object, Parent: parent, Children: in.children, Related: in.related, Finalizing: in.finalizing}
		var resp CompositeSyncResponse
		err := r.Hooks.CallEndpoint(ctx, ep, req, answerFor(in.hook, &resp))
		return hookAnswer{status: resp.Status, children: resp.Children, resyncAfter: resp.ResyncAfterSeconds, finalized: resp.Finalized}, err
	})
}

// hookInput is what a sync hook is told besides the controller and the
// object: its children (a DecoratorController's attachments), what the
// customize hook named, and whether the object is being deleted.
type hookInput struct {
	hook              *v1alpha1.Hook // the hook called: its version and decoding mode
	children, related ChildMap
	finalizing        bool
}

// hookAnswer is what either kind of controller's sync hook answers.
type hookAnswer struct {
	status              map[string]any
	children            []*unstructured.Unstructured
	labels, annotations map[string]*string // DecoratorController only
	resyncAfter         float64
	finalized           bool
}

// sync is one sync (or finalize) of obj, a CompositeController's parent or
// the object a DecoratorController decorates: call (the hook, in its
// controller's request and response shapes), then make the children, the
// labels and annotations and the status what it answered.
// A sync that fails leaves Metacontroller's Warning Event SyncError on obj.
func (r *Reconciler) sync(ctx context.Context, c *Controller, obj *unstructured.Unstructured,
	call func(ctx context.Context, ep Endpoint, in hookInput) (hookAnswer, error)) (reconcile.Result, error) {
	res, err := r.syncOnce(ctx, c, obj, call)
	r.syncError(obj, err)
	return res, err
}

func (r *Reconciler) syncOnce(ctx context.Context, c *Controller, obj *unstructured.Unstructured,
	call func(ctx context.Context, ep Endpoint, in hookInput) (hookAnswer, error)) (reconcile.Result, error) {
	defer r.Config.echoes.begin(string(obj.GetUID()))()
	finalizing, done, err := r.finalizer(ctx, c, obj)
	if err != nil || done {
		return reconcile.Result{}, err
	}
	observed, err := r.children(ctx, c, obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	hook := c.Sync
	if finalizing {
		hook = c.Finalize
	}
	related, err := r.relatedFor(ctx, c, obj, isV2(hook))
	if err != nil {
		return reconcile.Result{}, err
	}
	ep, err := r.endpoint(ctx, c, hook.Webhook)
	if err != nil {
		return reconcile.Result{}, r.hookFailed(ctx, c, obj, err)
	}
	url := ep.URL
	resp, err := call(ctx, ep, hookInput{hook: hook, children: observed.byKey(c, obj.GetNamespace(), isV2(hook)), related: related, finalizing: finalizing})
	if err != nil {
		return reconcile.Result{}, r.hookFailed(ctx, c, obj, err)
	}
	desired, err := desiredChildren(c, obj, resp.children)
	if err != nil {
		return reconcile.Result{}, r.hookFailed(ctx, c, obj, &BadAnswer{URL: url, Reason: err.Error()})
	}
	if err := r.applyChildren(ctx, c, obj, observed, desired); err != nil {
		return reconcile.Result{}, r.applyFailed(ctx, c, obj, err)
	}
	if err := r.patchMeta(ctx, obj, resp.labels, resp.annotations); err != nil {
		return reconcile.Result{}, err
	}
	if resp.status != nil {
		if err := r.writeStatus(ctx, obj, resp.status); err != nil {
			return reconcile.Result{}, err
		}
	}
	if finalizing && resp.finalized {
		return reconcile.Result{}, r.removeFinalizer(ctx, obj, c.Finalizer())
	}
	r.Config.echoes.left(c.Kind+"/"+c.Name, obj)
	res := r.resync(c, resp.resyncAfter)
	if r.restarting() && (res.RequeueAfter == 0 || res.RequeueAfter > learnedResync) {
		// The process restarts to watch what it learned: a change of it
		// that reaches this one before it exits is not mapped, so the sync
		// is done again once the next process watches it (serverless: a
		// durable Wakeup; classic: the restart lists every parent anyway).
		res.RequeueAfter = learnedResync
	}
	return res, nil
}

// childID identifies a child.
type childID struct {
	GK        schema.GroupKind
	Namespace string
	Name      string
}

type childSet map[childID]*unstructured.Unstructured

// byKey is the hook's view: "Kind.apiVersion" -> name -> object, with an
// entry for every child resource, named as objectName names them.
func (s childSet) byKey(c *Controller, parentNS string, v2 bool) ChildMap {
	out := ChildMap{}
	for _, ch := range c.Children {
		out[ChildKey(ch.APIVersion(), ch.GVK.Kind)] = map[string]*unstructured.Unstructured{}
	}
	for _, o := range s {
		m := out[ChildKey(o.GetAPIVersion(), o.GetKind())]
		if m == nil {
			continue
		}
		m[objectName(o, parentNS, v2)] = o
	}
	return out
}

// children lists the children of parent: objects of the child resources
// whose controller ownerReference is the parent.
func (r *Reconciler) children(ctx context.Context, c *Controller, parent *unstructured.Unstructured) (childSet, error) {
	out := childSet{}
	for _, ch := range c.Children {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(ch.GVK.GroupVersion().WithKind(ch.GVK.Kind + "List"))
		var opts []client.ListOption
		if ch.Namespaced && parent.GetNamespace() != "" {
			opts = append(opts, client.InNamespace(parent.GetNamespace()))
		}
		if err := r.Client.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing %s children of %s %s: %w", ch.GVK.Kind, parent.GetKind(), parent.GetName(), err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if ref := metav1.GetControllerOf(o); ref != nil && ref.UID == parent.GetUID() {
				o.SetGroupVersionKind(ch.GVK)
				out[childID{ch.GVK.GroupKind(), o.GetNamespace(), o.GetName()}] = o
			}
		}
	}
	return out, nil
}

// desiredChildren checks the hook's children and completes them (namespace,
// owner): an answer that names a kind the controller does not manage, a
// child without a name, another namespace or a duplicate is refused whole.
func desiredChildren(c *Controller, parent *unstructured.Unstructured, in []*unstructured.Unstructured) (childSet, error) {
	out := childSet{}
	for i, o := range in {
		if o == nil {
			return nil, fmt.Errorf("children[%d] is null", i)
		}
		var rule *Child
		for j := range c.Children {
			if c.Children[j].GVK.GroupKind() == o.GroupVersionKind().GroupKind() {
				rule = &c.Children[j]
			}
		}
		if rule == nil {
			return nil, fmt.Errorf("children[%d] is a %s %s, which %s %s does not list in its child resources", i, o.GetAPIVersion(), o.GetKind(), c.Kind, c.Name)
		}
		if o.GetName() == "" {
			return nil, fmt.Errorf("children[%d] (%s) has no metadata.name", i, o.GetKind())
		}
		o = o.DeepCopy()
		if rule.Namespaced {
			switch {
			case o.GetNamespace() == "":
				o.SetNamespace(parent.GetNamespace())
			case parent.GetNamespace() != "" && o.GetNamespace() != parent.GetNamespace():
				return nil, fmt.Errorf("children[%d] (%s %s) is in namespace %s; children live in their parent's namespace %s",
					i, o.GetKind(), o.GetName(), o.GetNamespace(), parent.GetNamespace())
			}
		} else {
			o.SetNamespace("")
		}
		id := childID{rule.GVK.GroupKind(), o.GetNamespace(), o.GetName()}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("children[%d]: %s %s is answered twice", i, o.GetKind(), o.GetName())
		}
		for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp"} {
			unstructured.RemoveNestedField(o.Object, "metadata", f)
		}
		unstructured.RemoveNestedField(o.Object, "status")
		t := true
		o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: parent.GetAPIVersion(), Kind: parent.GetKind(),
			Name: parent.GetName(), UID: parent.GetUID(), Controller: &t, BlockOwnerDeletion: &t}})
		out[id] = o
	}
	return out, nil
}

// applyChildren makes the children what the hook answered: missing ones are
// created, others updated per their resource's update strategy (OnDelete:
// never; InPlace: server-side apply; Recreate: deleted when a dry-run apply
// shows a difference, then created again by the sync its deletion causes),
// and children the hook no longer answers are deleted.
func (r *Reconciler) applyChildren(ctx context.Context, c *Controller, parent *unstructured.Unstructured, observed, desired childSet) error {
	method := map[schema.GroupKind]string{}
	for _, ch := range c.Children {
		method[ch.GVK.GroupKind()] = string(ch.Method)
	}
	for _, id := range sortedIDs(desired) {
		d, o := desired[id], observed[id]
		if o != nil && o.GetDeletionTimestamp() != nil {
			continue // being deleted (Recreate): created again once gone
		}
		owner := string(parent.GetUID())
		switch m := method[id.GK]; {
		case o == nil, m == "InPlace", m == "RollingInPlace":
			if err := r.apply(ctx, d, false); err != nil {
				return err
			}
			r.Config.echoes.left(owner, d) // the server's answer
		case m == "Recreate", m == "RollingRecreate":
			dry := d.DeepCopy()
			err := r.apply(ctx, dry, true)
			if err != nil && !apierrors.IsInvalid(err) {
				return err
			}
			if err != nil || !sameObject(o, dry) { // invalid: an immutable field (a Pod's spec) differs
				if err := r.delete(ctx, o); err != nil {
					return err
				}
				continue
			}
			r.Config.echoes.left(owner, o)
		default: // OnDelete: left as it is
			r.Config.echoes.left(owner, o)
		}
	}
	for _, id := range sortedIDs(observed) {
		if _, keep := desired[id]; !keep && observed[id].GetDeletionTimestamp() == nil {
			if err := r.delete(ctx, observed[id]); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedIDs(s childSet) []childID {
	out := make([]childID, 0, len(s))
	for id := range s {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.GK != b.GK {
			return a.GK.String() < b.GK.String()
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// apply server-side applies o (forcing ownership: the hook's answer is the
// truth for the fields it names); dryRun leaves the cluster unchanged and
// puts the result in o.
func (r *Reconciler) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	opts := []client.PatchOption{client.FieldOwner(r.fieldManager()), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	//nolint:staticcheck // client.Apply with a Patch is the unstructured path that returns the result into o
	if err := r.Client.Patch(ctx, o, client.Apply, opts...); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// delete deletes a child, only that very object (its UID).
func (r *Reconciler) delete(ctx context.Context, o *unstructured.Unstructured) error {
	uid := o.GetUID()
	err := r.Client.Delete(ctx, o, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// sameObject compares a child with what applying would make of it.
func sameObject(a, b *unstructured.Unstructured) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy().Object
		for _, f := range []string{"resourceVersion", "managedFields", "generation"} {
			unstructured.RemoveNestedField(c, "metadata", f)
		}
		unstructured.RemoveNestedField(c, "status")
		return c
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// writeStatus replaces the parent's status with the hook's, plus
// observedGeneration (as Metacontroller does) when the parent's schema has
// it, through the status subresource (the main resource if the kind has
// none).
func (r *Reconciler) writeStatus(ctx context.Context, parent *unstructured.Unstructured, status map[string]any) error {
	st, err := normalize(status)
	if err != nil {
		return err
	}
	if r.statusHas(ctx, parent, "observedGeneration") {
		st["observedGeneration"] = parent.GetGeneration()
	}
	cur, _, _ := unstructured.NestedMap(parent.Object, "status")
	if cur != nil {
		if curN, err := normalize(cur); err == nil && reflect.DeepEqual(curN, mustNormalize(st)) {
			return nil
		}
	}
	p := parent.DeepCopy()
	p.Object["status"] = st
	err = r.Client.Status().Update(ctx, p)
	if apierrors.IsNotFound(err) && p.GetUID() != "" {
		err = r.Client.Update(ctx, p) // no status subresource
	}
	if err != nil {
		return fmt.Errorf("writing the status of %s %s: %w", parent.GetKind(), parent.GetName(), err)
	}
	parent.Object = p.Object
	return nil
}

func normalize(m map[string]any) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}

func mustNormalize(m map[string]any) map[string]any {
	out, _ := normalize(m)
	return out
}

// setCondition sets the condition Synced in the parent's status, keeping
// the rest; nothing when the parent's schema has no status.conditions (the
// Warning Event beside it says the same).
func (r *Reconciler) setCondition(ctx context.Context, parent *unstructured.Unstructured, status, reason, msg string) error {
	if !r.statusHas(ctx, parent, "conditions") {
		return nil
	}
	p := parent.DeepCopy()
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	cond := map[string]any{"type": "Synced", "status": status, "reason": reason, "message": msg,
		"observedGeneration": p.GetGeneration(), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
	found := false
	for i, x := range conds {
		if m, ok := x.(map[string]any); ok && m["type"] == "Synced" {
			if m["status"] == status && m["reason"] == reason && m["message"] == msg {
				return nil
			}
			conds[i], found = cond, true
		}
	}
	if !found {
		conds = append(conds, cond)
	}
	if err := unstructured.SetNestedSlice(p.Object, conds, "status", "conditions"); err != nil {
		return err
	}
	err := r.Client.Status().Update(ctx, p)
	if apierrors.IsNotFound(err) {
		err = r.Client.Update(ctx, p)
	}
	if err != nil {
		return fmt.Errorf("writing condition Synced=%s on %s %s: %w", status, parent.GetKind(), parent.GetName(), err)
	}
	return nil
}

// removeFinalizer removes a finalizer with a JSON patch guarded by a test
// of the list (a concurrent change is a conflict, not a lost update).
func (r *Reconciler) removeFinalizer(ctx context.Context, o *unstructured.Unstructured, name string) error {
	cur := o.GetFinalizers()
	keep := []string{}
	for _, f := range cur {
		if f != name {
			keep = append(keep, f)
		}
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": cur},
		{"op": "replace", "path": "/metadata/finalizers", "value": keep},
	})
	err := r.Client.Patch(ctx, o, client.RawPatch(types.JSONPatchType, patch))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from %s %s: %w", name, o.GetKind(), o.GetName(), err)
	}
	return nil
}
