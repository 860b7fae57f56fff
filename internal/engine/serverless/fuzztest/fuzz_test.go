package fuzztest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/engine/serverless"
)

// offline is a client whose every read fails: the API server is away.
type offline struct {
	client.Client
	scheme *runtime.Scheme
}

var errOffline = errors.New("offline")

func (o offline) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errOffline
}
func (o offline) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errOffline
}
func (o offline) Scheme() *runtime.Scheme { return o.scheme }

// allowed are the answers the engine may give; anything else is a bug.
var allowed = map[int]bool{200: true, 400: true, 413: true, 422: true, 500: true, 503: true}

func FuzzServeHTTP(f *testing.F) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	reconciles := 0
	r := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		reconciles++
		return reconcile.Result{}, nil
	})
	op, err := builder.New(scheme).For(&corev1.Service{}).Owns(&corev1.Endpoints{}).
		Watches(&corev1.ConfigMap{}, func(ctx context.Context, c client.Reader, o client.Object) ([]reconcile.Request, error) {
			return nil, c.Get(ctx, client.ObjectKeyFromObject(o), &corev1.Service{})
		}).Build(r)
	if err != nil {
		f.Fatal(err)
	}
	e, err := serverless.New(op, offline{scheme: scheme}, serverless.Options{MaxBodyBytes: 64 << 10, MaxConcurrentReconciles: 1})
	if err != nil {
		f.Fatal(err)
	}
	svc := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"n","generation":2,"finalizers":["f"]},"status":{"observedGeneration":2}}`
	f.Add(true, "dev.knative.apiserver.resource.update", "Service", "v1", "s", "n", []byte(svc))
	f.Add(true, "dev.knative.apiserver.ref.update", "Endpoints", "v1", "e", "n", []byte(`{"kind":"Endpoints","namespace":"n","name":"e","apiVersion":"v1"}`))
	f.Add(true, "dev.knative.apiserver.resource.add", "ConfigMap", "v1", "c", "n", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"}}`))
	f.Add(true, "dev.knative.sources.ping", "", "", "", "", []byte(`{"namespace":"n","name":"s"}`))
	f.Add(false, "", "", "", "", "", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"dev.knative.sources.ping"}`))
	f.Fuzz(func(t *testing.T, binary bool, typ, kind, apiVersion, name, ns string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		if binary {
			for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": typ,
				"ce-kind": kind, "ce-apiversion": apiVersion, "ce-name": name, "ce-namespace": ns} {
				req.Header[http.CanonicalHeaderKey(k)] = []string{v}
			}
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/cloudevents+json")
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if !allowed[rec.Code] {
			t.Fatalf("answer %d %q is not one the engine documents", rec.Code, rec.Body.String())
		}
		if rec.Code >= 400 && rec.Body.Len() == 0 {
			t.Fatalf("answer %d without a body saying why", rec.Code)
		}
	})
}
