package metacontroller

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// warnings collects the API server's warnings.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// TestNoStatusFieldTheSchemaLacks: a parent whose CRD's status has neither
// observedGeneration nor conditions gets neither (the API server warned
// `unknown field "status.observedGeneration"` at every status write), and
// still gets the hook's status; a failed hook is then reported by its
// Warning Event alone.
func TestNoStatusFieldTheSchemaLacks(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	gvk := schema.GroupVersionKind{Group: "schema.example.com", Version: "v1", Kind: "Bare"}
	crd := &apiextv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "bares.schema.example.com"},
		Spec: apiextv1.CustomResourceDefinitionSpec{Group: gvk.Group, Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "bares", Singular: "bare", Kind: "Bare", ListKind: "BareList"},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Subresources: &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{
					"spec":   {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"who": {Type: "string"}}},
					"status": {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"message": {Type: "string"}}},
				}}}}}}}
	if err := env.Client.Create(ctx, crd); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme, Mapper: mapper, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	bare := &unstructured.Unstructured{}
	bare.SetGroupVersionKind(gvk)
	bare.SetNamespace(ns)
	bare.SetName("b")
	testkit.Eventually(t, 30*time.Second, "the Bare CRD is served", func(ctx context.Context) (bool, error) {
		return c.Create(ctx, bare.DeepCopy()) == nil, nil
	})
	answer := `{"status":{"message":"ok"}}`
	var mu sync.Mutex
	url := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write([]byte(answer))
	})
	parent, err := resolveResource(v1alpha1.ResourceRule{APIVersion: "schema.example.com/v1", Resource: "bares"}, mapper)
	if err != nil {
		t.Fatal(err)
	}
	ctl := &Controller{Kind: "CompositeController", Name: "bare", Object: map[string]any{}, Parents: []Decorated{{Resource: parent}}, Sync: webhook(url)}
	r := &Reconciler{Client: c, Config: &Config{Controllers: []*Controller{ctl}}, Hooks: &HookClient{}}
	if _, err := r.Reconcile(ctx, CompositeKey("bare", ns, "b")); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, got); err != nil {
		t.Fatal(err)
	}
	if msg, _, _ := unstructured.NestedString(got.Object, "status", "message"); msg != "ok" {
		t.Fatalf("status.message %q, want the hook's ok", msg)
	}
	mu.Lock()
	answer = `<html>`
	mu.Unlock()
	if _, err := r.Reconcile(ctx, CompositeKey("bare", ns, "b")); err == nil {
		t.Fatal("a garbage answer was taken")
	}
	for _, x := range w.all() {
		if strings.Contains(x, "unknown field") {
			t.Fatalf("the API server warned: %s", x)
		}
	}
}
