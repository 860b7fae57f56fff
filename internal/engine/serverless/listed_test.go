package serverless_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// TestMappedKeyStandsInFromTheMapsList: a watched object's event is mapped
// to primaries by a map function that lists them; each listed primary
// stands in for its reconcile's first Get (no GET of it), whether the map
// function lists through the reader the engine passes or through the
// reconcilers' client, as a controller-runtime map function closing over
// its reconciler's client does. A list of another kind with the same
// names, or a metadata-only list, stands in for nothing, and an object this instance wrote since
// the list is read from the API server; no write conflicts.
func TestMappedKeyStandsInFromTheMapsList(t *testing.T) {
	var viaClient client.Client
	var listKind string // "widgets" by the passed reader, "client" by the reconcilers' client, "configmaps"
	mapFn := func(ctx context.Context, r client.Reader, obj client.Object) ([]reconcile.Request, error) {
		var out []reconcile.Request
		switch listKind {
		case "metadata":
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(widgetGVK.GroupVersion().WithKind("WidgetList"))
			if err := r.List(ctx, l, client.InNamespace(obj.GetNamespace())); err != nil {
				return nil, err
			}
			for _, w := range l.Items {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
			}
			return out, nil
		case "configmaps":
			l := &corev1.ConfigMapList{}
			if err := r.List(ctx, l, client.InNamespace(obj.GetNamespace())); err != nil {
				return nil, err
			}
			for _, cm := range l.Items {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}})
			}
			return out, nil
		case "client":
			r = viaClient
		}
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(widgetGVK.GroupVersion().WithKind("WidgetList"))
		if err := r.List(ctx, l, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil, err
		}
		for _, w := range l.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.GetNamespace(), Name: w.GetName()}})
		}
		return out, nil
	}
	r := &writer{}
	h := newHarness(t, r, func(b *builder.Builder) *builder.Builder { return b.Watches(&corev1.ConfigMap{}, mapFn) }, serverless.Options{})
	r.c, viaClient = h.client, h.client
	h.create(newWidget(h.ns, "w"))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: h.ns}}
	h.create(cm)
	widgetPath := "/apis/test.opzero.dev/v1/namespaces/" + h.ns + "/widgets/w"

	deliver := func(kind string) []string {
		t.Helper()
		listKind = kind
		before := h.api.count()
		if a := h.post(h.event(cloudevent.Resource, cloudevent.Update, cm, "configmaps"), false); a.code != http.StatusOK {
			t.Fatalf("%s: the ConfigMap's event answered %d %s", kind, a.code, a.body)
		}
		return h.api.since(before)
	}
	if calls := deliver("widgets"); slices.Contains(calls, "GET "+widgetPath) {
		t.Errorf("listed by the passed reader: the reconcile still read the Widget: %q", calls)
	}
	// Another instance writes the Widget: what this one knows as its newest
	// (its own write) is no longer, and the list returns the other's.
	other := newWidget(h.ns, "w")
	if err := h.env.Client.Get(context.Background(), client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(other.Object, int64(2), "spec", "size")
	if err := h.env.Client.Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if calls := deliver("client"); !slices.Contains(calls, "GET "+widgetPath) {
		t.Errorf("a version this instance did not write or read last: want the reconcile's Get from the API server: %q", calls)
	}
	if calls := deliver("client"); slices.Contains(calls, "GET "+widgetPath) {
		t.Errorf("listed by the reconcilers' client: the reconcile still read the Widget: %q", calls)
	}
	if calls := deliver("configmaps"); !slices.Contains(calls, "GET "+widgetPath) {
		t.Errorf("a ConfigMap named as the Widget stood in for it: %q", calls)
	}
	if calls := deliver("metadata"); !slices.Contains(calls, "GET "+widgetPath) {
		t.Errorf("a metadata-only list of Widgets stood in for the whole Widget: %q", calls)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		if apierrors.IsConflict(err) {
			t.Errorf("a write conflicted: %v", err)
		}
	}
	if len(r.written) != 5 {
		t.Errorf("%d reconciles wrote, want 5 (%v)", len(r.written), r.errs)
	}
}
