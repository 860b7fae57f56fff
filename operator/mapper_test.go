package operator_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

// pathLog records the paths of the requests it carries.
type pathLog struct {
	next  http.RoundTripper
	mu    sync.Mutex
	paths []string
}

func (p *pathLog) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.paths = append(p.paths, r.URL.Path)
	p.mu.Unlock()
	return p.next.RoundTrip(r)
}

// TestGVMapper: against the real API server, the serverless client's
// mapper gives controller-runtime's mappings (namespaced and cluster-scoped
// built-in kinds, a CRD's kind) after discovering only the group-versions
// asked for, and controller-runtime's errors for kinds that do not exist.
func TestGVMapper(t *testing.T) {
	env := testenv.Get(t)
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	log := &pathLog{next: hc.Transport}
	hc.Transport = log
	m, err := operator.NewGVMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	hc2, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	want, err := apiutil.NewDynamicRESTMapper(env.Config, hc2)
	if err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "ConfigMap"},
		{Version: "v1", Kind: "Namespace"},
		{Group: "apps", Version: "v1", Kind: "Deployment"},
		{Group: "apps", Version: "v1", Kind: "StatefulSet"},
		{Group: "k8spatterns.io", Version: "v1", Kind: "ConfigWatcher"},
	} {
		got, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		exp, err := want.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		if got.Resource != exp.Resource || got.GroupVersionKind != exp.GroupVersionKind || got.Scope.Name() != exp.Scope.Name() {
			t.Errorf("%s: got %v %v %s, controller-runtime's %v %v %s", gvk, got.Resource, got.GroupVersionKind, got.Scope.Name(),
				exp.Resource, exp.GroupVersionKind, exp.Scope.Name())
		}
	}
	if wantPaths := []string{"/api/v1", "/apis/apps/v1", "/apis/k8spatterns.io/v1"}; !slices.Equal(log.paths, wantPaths) {
		t.Errorf("requests %v, want one discovery per group-version: %v", log.paths, wantPaths)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "NoSuchKind"},
		{Group: "nosuch.opzero.dev", Version: "v1", Kind: "Thing"},
	} {
		if _, err := m.RESTMapping(gvk.GroupKind(), gvk.Version); !meta.IsNoMatchError(err) {
			t.Errorf("%s: got %v, want a no-match error", gvk, err)
		}
	}
}

// holdPath holds the requests for one path until open is closed.
type holdPath struct {
	next http.RoundTripper
	path string
	open chan struct{}
	n    atomic.Int32 // requests for path
}

func (h *holdPath) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == h.path {
		h.n.Add(1)
		<-h.open
	}
	return h.next.RoundTrip(r)
}

// TestGVMapperConcurrent: while one group-version's discovery is under way,
// another group-version is mapped without waiting for it, and concurrent
// lookups of the one under way make no request of their own.
func TestGVMapperConcurrent(t *testing.T) {
	env := testenv.Get(t)
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	hold := &holdPath{next: hc.Transport, path: "/api/v1", open: make(chan struct{})}
	hc.Transport = hold
	m, err := operator.NewGVMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1"); err != nil {
				t.Error(err)
			}
		}()
	}
	testkit.Eventually(t, 10*time.Second, "the discovery of v1 under way", func(context.Context) (bool, error) { return hold.n.Load() > 0, nil })
	if _, err := m.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "v1"); err != nil {
		t.Fatalf("apps/v1 while v1 is discovered: %v", err)
	}
	close(hold.open)
	wg.Wait()
	if n := hold.n.Load(); n != 1 {
		t.Errorf("%d discoveries of v1 for 3 concurrent lookups, want 1", n)
	}
}
