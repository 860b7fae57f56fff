package admission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/opzero/opzero/internal/hub/starting"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestEarlyAdmission (real API server): an admission call for an operator
// whose Knative Service holds it (its activator waiting for a pod) is
// answered by the pod that starts, as soon as it listens and before it
// is ready; the held request is cancelled. A starting pod that answers
// anything but 200 leaves the call to the route; with no starting pod the
// route's answer is the call's.
func TestEarlyAdmission(t *testing.T) {
	env := testenv.Get(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		podAnswer int  // the starting pod's status code (200: an AdmissionReview)
		endpoint  bool // the Service has a starting pod
		wantEarly bool
	}{
		{name: "starting pod answers", podAnswer: http.StatusOK, endpoint: true, wantEarly: true},
		{name: "starting pod fails", podAnswer: http.StatusInternalServerError, endpoint: true},
		{name: "no starting pod", podAnswer: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			op := types.NamespacedName{Namespace: ns, Name: "gadgets"}
			route := newFakeOperator(t, true) // the activator at zero pods
			l, ip := testkit.HostListener(t)
			var podCalls atomic.Int64
			pod := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				podCalls.Add(1)
				if r.Header.Get("Authorization") != "Bearer token-for-aud-a" || r.URL.Path != "/mutate-gadget" {
					t.Errorf("the pod got %s with %q", r.URL.Path, r.Header.Get("Authorization"))
				}
				w.WriteHeader(tc.podAnswer)
				if tc.podAnswer == http.StatusOK {
					w.Write([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u1","allowed":true,"warnings":["from the starting pod"]}}`))
				}
			}))
			pod.Listener.Close()
			pod.Listener = l
			pod.Start()
			t.Cleanup(pod.Close)
			port, _ := strconv.ParseInt(pod.URL[strings.LastIndex(pod.URL, ":")+1:], 10, 64)
			ksvc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service",
				"metadata": map[string]any{"namespace": ns, "name": op.Name},
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
					"image": "ko://example.com/op", "ports": []any{map[string]any{"containerPort": port}}}}}}}}}
			if err := env.Client.Create(ctx, ksvc); err != nil {
				t.Fatal(err)
			}
			if tc.endpoint {
				slice := &unstructured.Unstructured{Object: testkit.PrivateEndpointSlice(ns, "gadgets-00001-private-abcde", op.Name, ip, false)}
				if err := env.Client.Create(ctx, slice); err != nil {
					t.Fatal(err)
				}
			}
			path := Path(ns, op.Name, "tok-a", "/mutate-gadget")
			tb := table{path: {operator: op, audience: "aud-a", path: "/mutate-gadget", webhooks: []string{"mgadget.example.com"},
				rules: rules("example.com", "gadgets", admissionregv1.Create), timeout: 3 * time.Second}}
			p := newTestProxy(tb, staticResolver{op: route.srv.URL}, 4)
			p.starting = starting.NewServices(dyn, testr.New(t))
			if !tc.wantEarly {
				// The route answers after a while.
				go func() {
					time.Sleep(time.Second)
					close(route.block)
				}()
			}
			rec := call(p, http.MethodPost, path, review("u1", "example.com", "gadgets", admissionv1.Create))
			early := strings.Contains(rec.Body.String(), "from the starting pod")
			if early != tc.wantEarly || p.early.Load() != map[bool]int64{true: 1}[tc.wantEarly] {
				t.Errorf("answered %d %s (early counter %d); want the starting pod's answer: %v", rec.Code, rec.Body, p.early.Load(), tc.wantEarly)
			}
			if tc.endpoint && podCalls.Load() != 1 {
				t.Errorf("the starting pod was called %d times, want once", podCalls.Load())
			}
			if !tc.endpoint && podCalls.Load() != 0 {
				t.Errorf("the pod was called %d times with no endpoint", podCalls.Load())
			}
			if !tc.wantEarly && rec.Code != http.StatusOK {
				t.Errorf("answered %d %s, want the route's answer", rec.Code, rec.Body)
			}
		})
	}
}
