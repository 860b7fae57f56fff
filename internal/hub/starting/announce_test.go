package starting

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// The bounds on what announcements make the hub ask the API server, with a
// fake API (what the API server answers is TestEarlyDelivery's, on a real
// one): the hub's own logic, counted call by call.

// fakeAPI answers TokenReviews: "good-<sa>" is the service account <sa> of
// namespace ns, anything else is refused. It holds the Knative Service
// ns/op, run as the service account op.
type fakeAPI struct {
	mu              sync.Mutex
	reviews, ksvcGs int
}

func newAnnouncer(t *testing.T, limit *rate.Limiter) (*announcer, *fakeAPI) {
	t.Helper()
	ksvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"namespace": "ns", "name": "op"},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"serviceAccountName": "op"}}},
	}}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{services: "ServiceList"}, ksvc)
	api := &fakeAPI{}
	dyn.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		api.mu.Lock()
		api.reviews++
		api.mu.Unlock()
		tr := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		tok, _, _ := unstructured.NestedString(tr.Object, "spec", "token")
		status := map[string]any{"authenticated": false, "error": "invalid bearer token"}
		if sa, ok := strings.CutPrefix(tok, "good-"); ok {
			status = map[string]any{"authenticated": true, "user": map[string]any{"username": "system:serviceaccount:ns:" + sa}}
		}
		out := tr.DeepCopy()
		out.Object["status"] = status
		return true, out, nil
	})
	dyn.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		api.mu.Lock()
		api.ksvcGs++
		api.mu.Unlock()
		return false, nil, nil // the tracker answers
	})
	s := NewServices(dyn, logr.Discard())
	return &announcer{s: s, reviewed: map[[sha256.Size]byte]reviewed{}, limit: limit}, api
}

func (f *fakeAPI) calls() (reviews, gets int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews, f.ksvcGs
}

func post(a *announcer, tok, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, AnnouncePath, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	a.serve(w, r)
	return w
}

const goodBody = `{"service":"op","address":"10.1.2.3:8080"}`

func told(a *announcer) int {
	s := a.s.Get("ns", "op")
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.told)
}

func TestAnnouncementsLimited(t *testing.T) {
	const burst = 5
	a, api := newAnnouncer(t, rate.NewLimiter(0, burst)) // no refill: the burst is all there is
	for i := range burst + 10 {
		w := post(a, fmt.Sprintf("forged-%d", i), goodBody)
		want := http.StatusUnauthorized
		if i >= burst {
			want = http.StatusTooManyRequests
		}
		if w.Code != want {
			t.Fatalf("announcement %d: answered %d, want %d", i, w.Code, want)
		}
		if want == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Errorf("announcement %d: 429 without Retry-After", i)
		}
	}
	if r, g := api.calls(); r != burst || g != 0 {
		t.Errorf("the API server was asked %d TokenReviews and %d GETs, want %d and 0", r, g, burst)
	}
	// Beyond the limit even a good announcement waits: nothing recorded.
	if w := post(a, "good-op", goodBody); w.Code != http.StatusTooManyRequests {
		t.Errorf("a good announcement beyond the limit: answered %d, want 429", w.Code)
	}
	if n := told(a); n != 0 {
		t.Errorf("%d announcements recorded after refusals, want 0", n)
	}
}

func TestAnnouncementVerdictsRemembered(t *testing.T) {
	a, api := newAnnouncer(t, rate.NewLimiter(rate.Inf, 1))
	for range 3 {
		if w := post(a, "forged", goodBody); w.Code != http.StatusUnauthorized {
			t.Fatalf("a forged token: answered %d, want 401", w.Code)
		}
	}
	if r, _ := api.calls(); r != 1 {
		t.Errorf("one forged token sent 3 times: %d TokenReviews, want 1 (its refusal remembered)", r)
	}
	for range 2 {
		if w := post(a, "good-other", goodBody); w.Code != http.StatusForbidden {
			t.Fatalf("another service account's token: answered %d, want 403", w.Code)
		}
	}
	if n := told(a); n != 0 {
		t.Fatalf("%d announcements recorded after refusals, want 0", n)
	}
	if w := post(a, "good-op", goodBody); w.Code != http.StatusNoContent {
		t.Fatalf("the Service's own service account: answered %d (%s), want 204", w.Code, w.Body)
	}
	if n := told(a); n != 1 {
		t.Errorf("%d announcements recorded, want 1", n)
	}
	if r, g := api.calls(); r != 3 || g != 1 {
		t.Errorf("%d TokenReviews and %d GETs of the Knative Service, want 3 (one per token) and 1 (the Service read once for the announcements past the review)", r, g)
	}
	// At most reviewedMax verdicts are kept, whatever is sent.
	for i := range reviewedMax + 10 {
		post(a, fmt.Sprintf("forged-%d", i), goodBody)
	}
	a.mu.Lock()
	n := len(a.reviewed)
	a.mu.Unlock()
	if n != reviewedMax {
		t.Errorf("%d verdicts kept, want the bound %d", n, reviewedMax)
	}
}

// One cold start reads the Knative Service once: the follower (its port)
// and the announcement (its service account) share a read until it is
// SpecFor old; a Service not found is not remembered.
func TestKnativeServiceReadOnce(t *testing.T) {
	a, api := newAnnouncer(t, rate.NewLimiter(rate.Inf, 1))
	clk := clocktesting.NewFakeClock(time.Now())
	a.s.specs = utilcache.NewExpiringWithClock(clk)
	port, err := a.s.Get("ns", "op").userPort(t.Context())
	if err != nil || port != 8080 {
		t.Fatalf("the follower's port: %d, %v; want 8080 (no port named)", port, err)
	}
	if w := post(a, "good-op", goodBody); w.Code != http.StatusNoContent {
		t.Fatalf("the Service's own service account: answered %d (%s), want 204", w.Code, w.Body)
	}
	if _, g := api.calls(); g != 1 {
		t.Errorf("the follower and the announcement: %d GETs of the Knative Service, want 1", g)
	}
	clk.Step(SpecFor + time.Millisecond)
	if w := post(a, "good-op", goodBody); w.Code != http.StatusNoContent {
		t.Fatalf("after SpecFor: answered %d (%s), want 204", w.Code, w.Body)
	}
	if _, g := api.calls(); g != 2 {
		t.Errorf("an announcement after SpecFor: %d GETs in all, want 2 (read again)", g)
	}
	for range 2 {
		if w := post(a, "good-op", `{"service":"gone","address":"10.1.2.3:8080"}`); w.Code != http.StatusForbidden {
			t.Fatalf("an announcement for a Service that is not there: answered %d, want 403", w.Code)
		}
	}
	if _, g := api.calls(); g != 4 {
		t.Errorf("two announcements for a Service not found: %d GETs in all, want 4 (not found is not remembered)", g)
	}
	if n := a.s.specs.Len(); n != 1 {
		t.Errorf("%d reads kept, want 1 (only Services found)", n)
	}
}

// A Knative Service's spec: the first container port named, the service
// account, and their defaults.
func TestSpecOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template map[string]any
		port     int64
		sa       string
	}{
		{"defaults", map[string]any{}, 8080, "default"},
		{"named", map[string]any{"serviceAccountName": "op", "containers": []any{
			map[string]any{"name": "side"},
			map[string]any{"ports": []any{map[string]any{"containerPort": int64(9000)}}},
		}}, 9000, "op"},
		{"port 0 is none", map[string]any{"containers": []any{map[string]any{"ports": []any{map[string]any{"containerPort": int64(0)}}}}}, 8080, "default"},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": tc.template}}}}
		if c := specOf(u); c.port != tc.port || c.sa != tc.sa {
			t.Errorf("%s: port %d, service account %q; want %d, %q", tc.name, c.port, c.sa, tc.port, tc.sa)
		}
	}
}
