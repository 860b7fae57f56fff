package dev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/opzero/opzero/internal/devenv/prune"
	"github.com/opzero/opzero/internal/kustomize"
)

// FieldManager owns the fields opzero dev applies and the statuses it writes.
const FieldManager = "opzero-dev"

// ReadManifests reads every object in path: a YAML or JSON file, a folder
// (its *.yaml, *.yml and *.json files, sorted, one level deep; a folder
// with a kustomization.yaml is rendered as with -k, ReadKustomization), or
// "-" for standard input. Documents that are empty or only comments are
// skipped; a document without apiVersion or kind is an error naming the
// file and the document's position.
func ReadManifests(path string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading manifests from standard input: %w", err)
		}
		return decode("standard input", b)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	files := []string{path}
	if st.IsDir() && kustomize.Has(path) {
		return ReadKustomization(path)
	}
	if st.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("manifests: no *.yaml, *.yml or *.json file in %s", path)
		}
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := decode(f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ReadKustomization renders the kustomization in dir with kustomize's
// library, as kubectl apply -k does (opzero dev -k), and reads its objects.
func ReadKustomization(dir string) ([]*unstructured.Unstructured, error) {
	b, err := kustomize.Render(dir)
	if err != nil {
		return nil, err
	}
	return decode(kustomize.File(dir)+" (rendered)", b)
}

func decode(name string, b []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for n := 1; ; n++ {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("manifests %s, document %d: not valid YAML or JSON: %w", name, n, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("manifests %s, document %d: no apiVersion or kind (is this a Kubernetes manifest?)", name, n)
		}
		if strings.HasSuffix(u.GetKind(), "List") && u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("manifests %s, document %d: %w", name, n, err)
			}
			for i := range l.Items {
				out = append(out, &l.Items[i])
			}
			continue
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("manifests %s, document %d (%s): no metadata.name", name, n, u.GetKind())
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("manifests %s: no objects", name)
	}
	return out, nil
}

// applier server-side applies objects through a dynamic client.
type applier struct {
	dyn       dynamic.Interface
	mapper    *restmapper.DeferredDiscoveryRESTMapper
	namespace string // for namespaced objects without one
}

func newApplier(cfg *rest.Config, namespace string) (*applier, error) {
	dyn, mapper, err := prune.Clients(cfg)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, namespace: namespace, mapper: mapper}, nil
}

// resource returns the client for u's kind, namespaced if the kind is; an
// empty namespace becomes the applier's.
func (a *applier) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: the API server does not serve this kind (is its CRD in the manifests or installed?): %w", gvk, u.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		return a.dyn.Resource(m.Resource), nil
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(a.namespace)
	}
	return a.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
}

// applyAll applies Namespaces and CRDs first (waiting until each CRD is
// established), then everything else in manifest order.
func (a *applier) applyAll(ctx context.Context, objs []*unstructured.Unstructured) error {
	first := func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition"
	}
	for _, pass := range []bool{true, false} {
		for _, u := range objs {
			if first(u) != pass {
				continue
			}
			if err := a.apply(ctx, u); err != nil {
				return err
			}
		}
		if pass {
			if err := a.waitCRDs(ctx, objs); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *applier) apply(ctx context.Context, u *unstructured.Unstructured) error {
	ri, err := a.resource(u)
	if err != nil {
		return err
	}
	obj := u.DeepCopy()
	unstructured.RemoveNestedField(obj.Object, "status")
	obj.SetResourceVersion("")
	_, err = ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), key(u), err)
	}
	return nil
}

func (a *applier) waitCRDs(ctx context.Context, objs []*unstructured.Unstructured) error {
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	waited := false
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		waited = true
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := a.dyn.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", u.GetName(), err)
		}
	}
	if waited {
		a.mapper.Reset()
	}
	return nil
}

// mapping resolves gvk, waiting up to 10 s for discovery to serve it: a
// CRD is Established before the API server's discovery lists its kind.
func (a *applier) mapping(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if !meta.IsNoMatchError(err) {
		return m, err
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		return !meta.IsNoMatchError(err), nil
	})
	return m, err
}

// get reads u back from the API server.
func (a *applier) get(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := a.resource(u)
	if err != nil {
		return nil, err
	}
	got, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading %s %s back: %w", u.GetKind(), key(u), err)
	}
	return got, nil
}

// patchStatus merges status into u's status subresource, retrying while
// the object is new (a conflict or not-found right after apply).
func (a *applier) patchStatus(ctx context.Context, u *unstructured.Unstructured, status map[string]any) error {
	ri, err := a.resource(u)
	if err != nil {
		return err
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
		"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
		"status":   status,
	}}
	b, err := patch.MarshalJSON()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Patch(ctx, u.GetName(), types.MergePatchType, b, metav1.PatchOptions{FieldManager: FieldManager}, "status")
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("writing the status of %s %s: %w", u.GetKind(), key(u), err)
	}
	return nil
}

func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}
