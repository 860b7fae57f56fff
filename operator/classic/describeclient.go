package classic

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errDescribing is what a read or a write answers while the binary
// describes itself (OPZERO_DESCRIBE): no API server is connected.
var errDescribing = errors.New("opzero: describing the operator (OPZERO_DESCRIBE): no API server to call")

// describingClient is the manager's client while describing. Finding a
// For-less controller's kind (adopt's SelfMappedKind) runs the project's
// handlers on probe objects, and a map function that lists through the
// manager's client (as one mapping a Namespace to every Bundle does) gets
// an error it can log, where a nil client made the binary panic before
// describing itself. Its Scheme and RESTMapper are the manager's.
type describingClient struct {
	client.Client // nil: methods of newer controller-runtimes not listed here
	scheme        *runtime.Scheme
	mapper        meta.RESTMapper
}

func (describingClient) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errDescribing
}
func (describingClient) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errDescribing
}
func (describingClient) Create(context.Context, client.Object, ...client.CreateOption) error {
	return errDescribing
}
func (describingClient) Delete(context.Context, client.Object, ...client.DeleteOption) error {
	return errDescribing
}
func (describingClient) Update(context.Context, client.Object, ...client.UpdateOption) error {
	return errDescribing
}
func (describingClient) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return errDescribing
}
func (describingClient) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return errDescribing
}
func (describingClient) Status() client.SubResourceWriter { return describingSub{} }
func (describingClient) SubResource(string) client.SubResourceClient {
	return describingSub{}
}
func (c describingClient) Scheme() *runtime.Scheme     { return c.scheme }
func (c describingClient) RESTMapper() meta.RESTMapper { return c.mapper }
func (c describingClient) GroupVersionKindFor(o runtime.Object) (schema.GroupVersionKind, error) {
	gvks, _, err := c.scheme.ObjectKinds(o)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gvks[0], nil
}
func (describingClient) IsObjectNamespaced(runtime.Object) (bool, error) { return false, errDescribing }

type describingSub struct {
	client.SubResourceClient // nil: methods of newer controller-runtimes not listed here
}

func (describingSub) Get(context.Context, client.Object, client.Object, ...client.SubResourceGetOption) error {
	return errDescribing
}
func (describingSub) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return errDescribing
}
func (describingSub) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	return errDescribing
}
func (describingSub) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errDescribing
}
