package standin

import (
	"context"
	"encoding/json"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Client is the client reconcilers get in both modes. Inside a reconcile
// (a State in the context) it answers the first Get of the reconciled key
// from the stand-in, if any, records the generation of the reconciled object
// whenever it is read, and reports every version of an object of the
// primary kind it reads or writes to the State's Versions. Outside a
// reconcile it is the client it wraps.
type Client struct {
	client.Client
}

var _ client.Client = Client{}

// NewClient wraps c.
func NewClient(c client.Client) Client { return Client{Client: c} }

// Get answers the reconcile's first Get of its own key from the event's
// object when there is one, and goes to the API server otherwise.
func (c Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s, gvk := c.cached(ctx, obj); s != nil {
		if raw := s.cache.Get(gvk, key); raw != nil && len(opts) == 0 && DecodeInto(raw, obj) == nil {
			s.answeredFromMemory()
			return nil
		}
		token := s.cache.ReadStart(gvk)
		err := c.Client.Get(ctx, key, obj, opts...)
		switch {
		case err == nil:
			s.cache.Observed(gvk, key, obj.GetResourceVersion())
			if len(opts) == 0 {
				s.cache.Read(gvk, token, obj)
			}
		case apierrors.IsNotFound(err):
			s.cache.Observed(gvk, key, "")
		}
		return err
	}
	s := c.primary(ctx, obj)
	if s == nil {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	if key == s.key {
		// Current again: a deletion may have been seen since the stand-in was chosen.
		if raw := s.take(); raw != nil && len(opts) == 0 && DecodeInto(raw, obj) == nil && s.versions.Current(key, obj.GetResourceVersion()) {
			s.sawGeneration(obj.GetGeneration())
			s.answeredFromMemory()
			return nil
		}
	}
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			s.versions.Gone(key)
			if key == s.key {
				s.sawGone(true)
			}
		}
		return err
	}
	if key == s.key {
		s.sawGeneration(obj.GetGeneration())
		s.sawGone(false)
	}
	s.versions.Observed(key, obj.GetResourceVersion())
	return nil
}

// List lists, and records what it returns for the map function that made
// it with a Listed's context (Listed.With).
func (c Client) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := c.Client.List(ctx, list, opts...)
	if err == nil {
		recordList(ctx, c.Client, list)
	}
	return err
}

// Create creates obj and records its version.
func (c Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.observe(ctx, obj, c.Client.Create(ctx, obj, opts...))
}

// Update updates obj and records its new version.
func (c Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.observe(ctx, obj, c.Client.Update(ctx, obj, opts...))
}

// Patch patches obj and records its new version.
func (c Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.observe(ctx, obj, c.Client.Patch(ctx, obj, patch, opts...))
}

// Delete deletes obj; its versions are forgotten (an object being deleted
// with finalizers is read again by the next reconcile).
func (c Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	err := c.Client.Delete(ctx, obj, opts...)
	if s := c.primary(ctx, obj); s != nil {
		s.versions.Forget(client.ObjectKeyFromObject(obj))
	}
	if s, gvk := c.cached(ctx, obj); s != nil {
		s.cache.Observed(gvk, client.ObjectKeyFromObject(obj), "")
	}
	return err
}

// Status is the status subresource's writer, recording versions too.
func (c Client) Status() client.SubResourceWriter {
	return subWriter{SubResourceWriter: c.Client.Status(), c: c}
}

// SubResource is a subresource's client, recording versions of its writes.
func (c Client) SubResource(name string) client.SubResourceClient {
	sc := c.Client.SubResource(name)
	return subClient{SubResourceReader: sc, subWriter: subWriter{SubResourceWriter: sc, c: c}}
}

// primary returns the reconcile's state if obj is of the reconciled kind
// and this instance tracks versions, nil otherwise.
func (c Client) primary(ctx context.Context, obj client.Object) *State {
	s := From(ctx)
	if s == nil {
		return nil
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil || gvk != s.gvk {
		return nil
	}
	return s
}

// cached returns the reconcile's state and obj's kind if the state has a
// Cache that holds that kind (never the primary kind), nil otherwise.
func (c Client) cached(ctx context.Context, obj client.Object) (*State, schema.GroupVersionKind) {
	s := From(ctx)
	if s == nil || s.cache == nil {
		return nil, schema.GroupVersionKind{}
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil || gvk == s.gvk || !s.cache.Holds(gvk) {
		return nil, schema.GroupVersionKind{}
	}
	return s, gvk
}

// observe records obj's version after a successful write, and that it is
// gone after a write that found it missing.
func (c Client) observe(ctx context.Context, obj client.Object, err error) error {
	if apierrors.IsNotFound(err) {
		if s := c.primary(ctx, obj); s != nil {
			s.versions.Gone(client.ObjectKeyFromObject(obj))
		}
		if s, gvk := c.cached(ctx, obj); s != nil {
			s.cache.Observed(gvk, client.ObjectKeyFromObject(obj), "")
		}
	}
	if err != nil {
		return err
	}
	if s := c.primary(ctx, obj); s != nil {
		s.versions.Observed(client.ObjectKeyFromObject(obj), obj.GetResourceVersion())
	}
	if s, gvk := c.cached(ctx, obj); s != nil {
		s.cache.Observed(gvk, client.ObjectKeyFromObject(obj), obj.GetResourceVersion())
	}
	return nil
}

// subWriter embeds the writer it wraps, so that a method controller-runtime
// adds to client.SubResourceWriter (Apply, v0.22) passes through unchanged
// with every supported version.
type subWriter struct {
	client.SubResourceWriter
	c Client
}

func (s subWriter) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.SubResourceWriter.Create(ctx, obj, sub, opts...) // writes sub, not obj
}

func (s subWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.observe(ctx, obj, s.SubResourceWriter.Update(ctx, obj, opts...))
}

func (s subWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.observe(ctx, obj, s.SubResourceWriter.Patch(ctx, obj, patch, opts...))
}

type subClient struct {
	client.SubResourceReader
	subWriter
}

// DecodeInto replaces obj's content with the JSON object raw.
func DecodeInto(raw []byte, obj client.Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.Object = nil
		return u.UnmarshalJSON(raw)
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return json.Unmarshal(raw, obj)
	}
	v.Elem().Set(reflect.Zero(v.Elem().Type()))
	return json.Unmarshal(raw, obj)
}
