package operator

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// gvMapper is the serverless client's RESTMapper. A typed client asks for
// a kind at a known version; gvMapper answers by discovering that one
// group-version (GET /api/v1, /apis/<group>/<version>: a few KB) instead
// of controller-runtime's first discovery of every group and resource of
// the cluster (the aggregated /api and /apis, hundreds of KB decoded into
// a mapper of every kind). That is the first reconcile of a cold start,
// and heap an instance keeps. Anything else (no version, a kind its
// group-version does not list, a failed lookup) goes to controller-runtime's
// mapper, which also owns the rules for reloading.
type gvMapper struct {
	meta.RESTMapper
	disc discovery.DiscoveryInterface

	mu  sync.Mutex
	gvs map[schema.GroupVersion]*gvKinds
}

// gvKinds is one group-version's discovery: kinds is set before done is
// closed, nil if the lookup failed.
type gvKinds struct {
	done  chan struct{}
	kinds map[string]*meta.RESTMapping // by kind
}

var _ meta.RESTMapper = (*gvMapper)(nil)

func newGVMapper(cfg *rest.Config, hc *http.Client) (*gvMapper, error) {
	fallback, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &gvMapper{RESTMapper: fallback, disc: disc, gvs: map[schema.GroupVersion]*gvKinds{}}, nil
}

// RESTMapping maps gk at one given version from that group-version's
// discovery; otherwise controller-runtime's mapper answers.
func (m *gvMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) == 1 && versions[0] != "" {
		if kinds := m.groupVersion(schema.GroupVersion{Group: gk.Group, Version: versions[0]}); kinds != nil {
			if mp, ok := kinds[gk.Kind]; ok {
				return mp, nil
			}
		}
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// groupVersion is gv's kinds, discovered once; nil if the lookup failed
// (not kept: the next call asks again). Different group-versions are
// discovered concurrently; callers asking for one being discovered wait
// for that lookup instead of making their own.
func (m *gvMapper) groupVersion(gv schema.GroupVersion) map[string]*meta.RESTMapping {
	m.mu.Lock()
	if g, ok := m.gvs[gv]; ok {
		m.mu.Unlock()
		<-g.done
		return g.kinds
	}
	g := &gvKinds{done: make(chan struct{})}
	m.gvs[gv] = g
	m.mu.Unlock()
	g.kinds = m.discover(gv)
	if g.kinds == nil {
		m.mu.Lock()
		delete(m.gvs, gv)
		m.mu.Unlock()
	}
	close(g.done)
	return g.kinds
}

// discover reads gv's resources from the API server: nil if it failed.
func (m *gvMapper) discover(gv schema.GroupVersion) map[string]*meta.RESTMapping {
	list, err := m.disc.ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return nil
	}
	kinds := map[string]*meta.RESTMapping{}
	for _, r := range list.APIResources {
		if strings.Contains(r.Name, "/") { // a subresource
			continue
		}
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		kinds[r.Kind] = &meta.RESTMapping{Resource: gv.WithResource(r.Name), GroupVersionKind: gv.WithKind(r.Kind), Scope: scope}
	}
	return kinds
}
