package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/internal/standin"
)

// Client is the client reconcilers get in plan mode. Every write goes
// through controller-runtime's client.NewDryRunClient (DryRun: All, so
// admission and defaulting run as for real) and, inside a planned
// reconcile, is recorded with the fields it would change; reads see what
// earlier writes of the plan would have left (the overlay). Methods it
// does not override (Apply, in controller-runtime v0.22 and later) go to
// the dry-run client: dry-run, not recorded.
type Client struct {
	client.Client // the dry-run client
	raw           client.Client
	done          *overlay // writes of the rounds before
}

var _ client.Client = (*Client)(nil)

// NewClient wraps c (which reads and writes the API server).
func NewClient(c client.Client) *Client {
	return &Client{Client: client.NewDryRunClient(c), raw: c, done: newOverlay()}
}

func (c *Client) gvk(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, c.Scheme())
}

// lookup finds k in the reconcile's own writes, then in the rounds
// before; fromBefore says the latter.
func (c *Client) lookup(rec *record, k okey) (e entry, ok, fromBefore bool) {
	if rec != nil {
		if e, ok := rec.local.get(k); ok {
			return e, true, false
		}
	}
	e, ok = c.done.get(k)
	return e, ok, ok
}

// Get reads obj as the plan would have left it, else from the API server.
func (c *Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := c.gvk(obj)
	if err != nil {
		return c.raw.Get(ctx, key, obj, opts...)
	}
	rec, k := recordFrom(ctx), keyOf(gvk, key)
	if e, ok, before := c.lookup(rec, k); ok {
		if before && rec != nil {
			rec.inexact(fmt.Sprintf("read %s as the plan would have written it in round %d", refOf(gvk, key), e.round))
		}
		if e.deleted {
			return notFound(gvk, key)
		}
		if err := decode(e.raw, obj, gvk); err != nil {
			return err
		}
		rec.sawReadObject(k, obj)
		return nil
	}
	if err := c.raw.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	rec.sawReadObject(k, obj)
	return nil
}

// List lists from the API server, then replaces, drops and adds what
// the rounds before (and the reconcile itself) would have written.
func (c *Client) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.raw.List(ctx, list, opts...); err != nil {
		return err
	}
	gvk, err := c.gvk(list)
	if err != nil {
		return nil
	}
	item := gvk.GroupVersion().WithKind(trimList(gvk.Kind))
	rec := recordFrom(ctx)
	entries := c.done.kind(item.Group, item.Kind)
	if rec != nil {
		entries = append(entries, rec.local.kind(item.Group, item.Kind)...)
	}
	if len(entries) == 0 {
		return nil
	}
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	return overlayList(list, item, lo, entries, func(k okey, round int) {
		if rec != nil && round < rec.round {
			rec.inexact(fmt.Sprintf("listed %s as the plan would have written it in round %d", refOf(item, client.ObjectKey{Namespace: k.namespace, Name: k.name}), round))
		}
	})
}

// Create creates obj in dry-run and records it.
func (c *Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.write(ctx, "create", "", obj, false, func() error { return c.Client.Create(ctx, obj, opts...) })
}

// Update updates obj in dry-run and records the fields it changes.
func (c *Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.write(ctx, "update", "", obj, false, func() error { return c.Client.Update(ctx, obj, opts...) })
}

// Patch patches obj in dry-run and records the fields it changes.
func (c *Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.write(ctx, "patch", "", obj, isApply(patch), func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

// Delete deletes obj in dry-run and records it.
func (c *Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.write(ctx, "delete", "", obj, false, func() error { return c.Client.Delete(ctx, obj, opts...) })
}

// DeleteAllOf deletes in dry-run and records the kind and namespace.
func (c *Client) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	err := c.Client.DeleteAllOf(ctx, obj, opts...)
	if rec := recordFrom(ctx); rec.open() {
		gvk, _ := c.gvk(obj)
		w := plan.Write{Verb: "deleteAllOf", Ref: refOf(gvk, client.ObjectKey{Namespace: (&client.DeleteAllOfOptions{}).ApplyOptions(opts).Namespace, Name: "*"})}
		if err != nil {
			w.Error = err.Error()
		}
		rec.addWrite(w, nil)
		rec.inexact("DeleteAllOf: the objects it would delete are not listed one by one")
	}
	return err
}

// Status is the status subresource's writer, dry-run and recorded.
func (c *Client) Status() client.SubResourceWriter { return c.SubResource("status") }

// SubResource is a subresource's client, its writes dry-run and recorded.
func (c *Client) SubResource(name string) client.SubResourceClient {
	return &subClient{SubResourceClient: c.Client.SubResource(name), c: c, name: name}
}

type subClient struct {
	client.SubResourceClient // dry-run
	c                        *Client
	name                     string
}

func (s *subClient) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.c.write(ctx, "create", s.name, obj, false, func() error { return s.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (s *subClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.write(ctx, "update", s.name, obj, false, func() error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *subClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.write(ctx, "patch", s.name, obj, isApply(patch), func() error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

// write sends one dry-run write and records what it would change. An
// update or patch of an object that exists only in the plan cannot be
// dry-run (the API server has no such object): it is recorded from the
// object the reconciler sent, and the plan says it is not exact. A
// server-side apply (apply) is always sent: it creates what is missing.
// A write of an object the plan has already written (in this reconcile
// or a round before) is dry-run against the API server's object, then
// composed with the planned one (compose): it is diffed against, and
// leaves, the planned object with only its own change.
func (c *Client) write(ctx context.Context, verb, sub string, obj client.Object, apply bool, send func() error) error {
	rec := recordFrom(ctx)
	gvk, gerr := c.gvk(obj)
	if !rec.open() || gerr != nil {
		return send()
	}
	key := client.ObjectKeyFromObject(obj)
	k := keyOf(gvk, key)
	pr := prior{absent: verb == "create" && sub == ""}
	if verb != "create" || sub != "" {
		pr = c.before(ctx, rec, gvk, k, obj)
		if pr.deleted && sub == "" && !apply {
			err := notFound(gvk, key) // the API server still has it: the plan deleted it
			rec.addWrite(plan.Write{Verb: verb, Ref: refOf(gvk, key), Error: err.Error()}, nil)
			return err
		}
		if pr.deleted && apply {
			rec.inexact(fmt.Sprintf("%s %s is applied again after the plan deleted it: the dry-run applies it to the object the API server still has", gvk.Kind, key))
		}
	}
	before, created := pr.m, pr.created
	var err error
	if created && !apply && sub != "create" && (verb == "update" || verb == "patch") {
		rec.inexact(fmt.Sprintf("%s %s exists only in the plan: its %s was not sent to the API server", gvk.Kind, key, verb))
		if verb == "patch" {
			rec.inexact(fmt.Sprintf("the patch of %s %s is not applied to it in the plan", gvk.Kind, key))
			obj = keepBefore(before, obj, gvk)
		}
	} else {
		err = send()
	}
	if verb == "create" && sub == "" {
		key = client.ObjectKeyFromObject(obj) // generateName: the API server's
		k = keyOf(gvk, key)
	}
	w := plan.Write{Verb: verb, Subresource: sub, Ref: refOf(gvk, key)}
	if err != nil {
		w.Error = err.Error()
		rec.addWrite(w, nil)
		return err
	}
	var after map[string]any
	e := entry{round: rec.round, created: created || pr.absent && sub == ""}
	if !e.created {
		e.server = pr.server
	}
	if verb == "delete" && sub == "" {
		e.deleted = true
	} else {
		raw, _ := json.Marshal(obj)
		if pr.planned && !created && before != nil && (sub == "" || sub == "status") && (verb == "update" || verb == "patch") {
			if m := compose(verb, sub, toMap(pr.server), toMap(raw), before); m != nil {
				if b, merr := json.Marshal(m); merr == nil && decode(b, obj, gvk) == nil {
					raw = b // the reconciler's object is what the API server would answer
				}
			}
		}
		e.raw = raw
		after = toMap(raw)
		if sub == "" || verb != "create" {
			w.Changes = plan.Diff(before, after)
		}
	}
	// A Secret's values are left out of the plan: its keys, never values.
	w.Changes = plan.RedactSecret(w.Ref, w.Changes)
	if sub == "" || verb != "create" { // a subresource's create (an eviction) leaves obj as it is
		rec.local.put(k, e)
		rec.sawRead(k, e.raw)
	}
	rec.addWrite(w, &written{gvk: gvk, key: key, verb: verb, sub: sub, before: before, after: after})
	return nil
}

// prior is an object as the plan has it before a write.
type prior struct {
	m map[string]any
	// created: it exists only in the plan; deleted: the plan deleted it;
	// absent: neither the plan nor the API server has it.
	created, deleted, absent bool
	// planned: m is what an earlier write of the plan left.
	planned bool
	// server is the API server's object (JSON; nil unknown).
	server []byte
}

// before is obj as the plan has it before a write: as the reconcile
// last read or wrote it, else from the API server (a GET of the same
// type).
func (c *Client) before(ctx context.Context, rec *record, gvk schema.GroupVersionKind, k okey, obj client.Object) prior {
	if e, ok, _ := c.lookup(rec, k); ok {
		if e.deleted {
			return prior{deleted: true}
		}
		p := prior{created: e.created, planned: true, server: e.server}
		if raw, ok := rec.lastRead(k); ok && raw != nil {
			p.m = toMap(raw)
		} else {
			p.m = toMap(e.raw)
		}
		return p
	}
	if raw, ok := rec.lastRead(k); ok {
		return prior{m: toMap(raw), server: raw}
	}
	fresh := newLike(obj, gvk)
	err := c.raw.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, fresh)
	if apierrors.IsNotFound(err) {
		return prior{absent: true}
	}
	if err != nil {
		rec.inexact(fmt.Sprintf("could not read %s %s/%s before writing it (%v): its diff lists every field", gvk.Kind, k.namespace, k.name, err))
		return prior{}
	}
	raw, _ := json.Marshal(fresh)
	return prior{m: toMap(raw), server: raw}
}

func isApply(p client.Patch) bool { return p.Type() == types.ApplyPatchType }

// keepBefore sets obj back to before: a patch of an object only the plan
// has is not applied (an update is recorded as sent).
func keepBefore(before map[string]any, obj client.Object, gvk schema.GroupVersionKind) client.Object {
	if before == nil {
		return obj
	}
	raw, _ := json.Marshal(before)
	_ = decode(raw, obj, gvk)
	return obj
}

// sawReadObject records obj as the reconcile read it.
func (r *record) sawReadObject(k okey, obj client.Object) {
	if r == nil {
		return
	}
	raw, err := json.Marshal(obj)
	if err == nil {
		r.sawRead(k, raw)
	}
}

// newLike returns a new, empty object of obj's Go type (and kind).
func newLike(obj client.Object, gvk schema.GroupVersionKind) client.Object {
	switch obj.(type) {
	case *unstructured.Unstructured:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return u
	case *metav1.PartialObjectMetadata:
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return m
	}
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
}

// decode replaces obj's content with raw, keeping its kind set where
// the Go type does not imply it.
func decode(raw []byte, obj client.Object, gvk schema.GroupVersionKind) error {
	if err := standin.DecodeInto(raw, obj); err != nil {
		return err
	}
	switch obj.(type) {
	case *unstructured.Unstructured, *metav1.PartialObjectMetadata:
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return nil
}

func toMap(raw []byte) map[string]any {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func notFound(gvk schema.GroupVersionKind, key client.ObjectKey) error {
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: plural.Resource}, key.Name)
}

func refOf(gvk schema.GroupVersionKind, key client.ObjectKey) plan.Ref {
	return plan.Ref{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: key.Namespace, Name: key.Name}
}

func trimList(kind string) string {
	if len(kind) > 4 && kind[len(kind)-4:] == "List" {
		return kind[:len(kind)-4]
	}
	return kind
}
