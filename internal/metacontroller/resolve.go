package metacontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// knativeService is serving.knative.dev/v1 Service.
var knativeService = schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}

// hookURL is where a webhook is called. A url is used as written. A
// service reference resolves, as Knative resolves a sink's ref, to the
// status.address.url of a Knative Service of that name if there is one
// (a hook that scales to zero), else to Metacontroller's
// <protocol>://<name>.<namespace>:<port><path> (port 80, http).
func (r *Reconciler) hookURL(ctx context.Context, w *v1alpha1.Webhook) (string, time.Duration, error) {
	var timeout time.Duration
	if w.Timeout != nil {
		timeout = w.Timeout.Duration
	}
	path := ""
	if w.Path != nil {
		path = *w.Path
	}
	switch {
	case w.URL != nil && *w.URL != "":
		return *w.URL, timeout, nil
	case w.Service != nil:
		s := w.Service
		ks := &unstructured.Unstructured{}
		ks.SetGroupVersionKind(knativeService)
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, ks)
		switch {
		case err == nil:
			u, _, _ := unstructured.NestedString(ks.Object, "status", "address", "url")
			if u == "" {
				return "", 0, fmt.Errorf("Knative Service %s/%s, the hook, has no status.address.url yet (not ready)", s.Namespace, s.Name)
			}
			return strings.TrimSuffix(u, "/") + path, timeout, nil
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err), apierrors.IsForbidden(err):
		default:
			return "", 0, fmt.Errorf("reading Knative Service %s/%s, the hook: %w", s.Namespace, s.Name, err)
		}
		proto, port := "http", int32(80)
		if s.Protocol != nil && *s.Protocol != "" {
			proto = *s.Protocol
		}
		if s.Port != nil {
			port = *s.Port
		}
		return fmt.Sprintf("%s://%s.%s:%d%s", proto, s.Name, s.Namespace, port, path), timeout, nil
	}
	return "", 0, errors.New("the webhook has neither url nor service")
}

// check compares a controller in the cluster with the one loaded at start
// (nil: none was) and calls OnChange when they differ.
func (r *Reconciler) check(ctx context.Context, kind, name string, loaded *Controller) error {
	var obj client.Object
	var spec any
	switch kind {
	case "CompositeController":
		o := &v1alpha1.CompositeController{}
		obj, spec = o, &o.Spec
	default:
		o := &v1alpha1.DecoratorController{}
		obj, spec = o, &o.Spec
	}
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	var why string
	switch {
	case err != nil && loaded != nil:
		why = kind + " " + name + " was deleted"
	case err == nil && loaded == nil:
		why = kind + " " + name + " was created"
	case err == nil && specHash(spec, obj.GetAnnotations()) != loaded.Hash:
		why = kind + " " + name + " changed"
	}
	if why != "" && r.OnChange != nil {
		r.OnChange(why)
	}
	return nil
}
