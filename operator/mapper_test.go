package operator_test

import (
	"net/http"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

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
