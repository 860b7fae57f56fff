package metacontroller

import (
	"context"
	"sync"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// statusFields answers whether a parent's schema has a status field that
// opzero writes beside the hook's status (observedGeneration, conditions):
// a custom resource's CRD says (properties, or
// x-kubernetes-preserve-unknown-fields); a built-in kind, or a CRD the
// operator may not read, is taken to have it. The answer is kept per
// resource and version for the process.
type statusFields struct {
	mu  sync.Mutex
	has map[string]bool // "<group>/<version>/<kind>/<field>"
}

// statusHas reports whether obj's kind has status.<field> in its schema.
func (r *Reconciler) statusHas(ctx context.Context, obj *unstructured.Unstructured, field string) bool {
	gvk := obj.GroupVersionKind()
	key := gvk.String() + "/" + field
	r.fields.mu.Lock()
	defer r.fields.mu.Unlock()
	if has, ok := r.fields.has[key]; ok {
		return has
	}
	has := r.readStatusHas(ctx, gvk, field)
	if r.fields.has == nil {
		r.fields.has = map[string]bool{}
	}
	r.fields.has[key] = has
	return has
}

func (r *Reconciler) readStatusHas(ctx context.Context, gvk schema.GroupVersionKind, field string) bool {
	m, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil || gvk.Group == "" {
		return true
	}
	crd := &apiextv1.CustomResourceDefinition{}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiextv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := r.Client.Get(ctx, client.ObjectKey{Name: m.Resource.Resource + "." + gvk.Group}, u); err != nil {
		if !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("cannot read the CRD of the parent's kind; writing status."+field+" as if its schema had it", "kind", gvk.String(), "error", err.Error())
		}
		return true // a built-in kind (or unknown): as before
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
		return true
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != gvk.Version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		root := v.Schema.OpenAPIV3Schema
		if preserves(root) {
			return true
		}
		st, ok := root.Properties["status"]
		if !ok {
			return false
		}
		if preserves(&st) {
			return true
		}
		_, ok = st.Properties[field]
		return ok
	}
	return true
}

func preserves(s *apiextv1.JSONSchemaProps) bool {
	return s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields
}
