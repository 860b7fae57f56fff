package wakesource

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// OperatorLabel names the operator a Wakeup belongs to.
const OperatorLabel = "opzero.dev/operator"

// Records is how a Source reads and deletes Wakeups: client-go's dynamic
// client (Dynamic), or controller-runtime's (package wakeup). The package
// links neither controller-runtime nor client-go's typed clients, so a
// small always-on process (the hub) stays small.
type Records interface {
	// List lists Wakeups in namespace ("" all).
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*v1alpha1.WakeupList, error)
	// Watch watches them; its objects are *v1alpha1.Wakeup (errors: a
	// Status as the API server sends it).
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	// Delete deletes one if it still has resourceVersion.
	Delete(ctx context.Context, namespace, name, resourceVersion string) error
}

var wakeups = v1alpha1.GroupVersion.WithResource("wakeups")

// Dynamic reads and deletes Wakeups through client-go's dynamic client.
func Dynamic(d dynamic.Interface) Records { return dynRecords{d} }

type dynRecords struct{ d dynamic.Interface }

func (r dynRecords) List(ctx context.Context, ns string, opts metav1.ListOptions) (*v1alpha1.WakeupList, error) {
	u, err := r.d.Resource(wakeups).Namespace(ns).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.WakeupList{ListMeta: metav1.ListMeta{ResourceVersion: u.GetResourceVersion(), Continue: u.GetContinue()}}
	out.Items = make([]v1alpha1.Wakeup, len(u.Items))
	for i := range u.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Items[i].Object, &out.Items[i]); err != nil {
			return nil, fmt.Errorf("wakeup %s/%s: %w", u.Items[i].GetNamespace(), u.Items[i].GetName(), err)
		}
	}
	return out, nil
}

func (r dynRecords) Watch(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := r.d.Resource(wakeups).Namespace(ns).Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || ev.Type == watch.Error {
			return ev, true
		}
		wk := &v1alpha1.Wakeup{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, wk); err != nil {
			return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}, true
		}
		ev.Object = wk
		return ev, true
	}), nil
}

func (r dynRecords) Delete(ctx context.Context, ns, name, rv string) error {
	return r.d.Resource(wakeups).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
}
