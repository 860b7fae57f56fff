package metacontroller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
	"github.com/opzero/opzero/testenv"
)

// TestFileMapperAgreesWithTheAPIServer: every built-in resource the API
// server serves (apiextensions' customresourcedefinitions included)
// resolves offline, as `opzero manifests` resolves it, to the kind and
// scope the API server reports.
func TestFileMapperAgreesWithTheAPIServer(t *testing.T) {
	env := testenv.Get(t)
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	fm := newFileMapper(nil)
	checked := 0
	var newer []string
	for _, l := range lists {
		if strings.HasSuffix(l.GroupVersion, ".example.com/v1") || l.GroupVersion == "example.com/v1" ||
			strings.Contains(l.GroupVersion, "metacontroller.k8s.io") ||
			strings.Contains(l.GroupVersion, "knative.dev/") || strings.HasPrefix(l.GroupVersion, "opzero.dev/") {
			continue // CRDs the tests install
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !hasVerb(r.Verbs, "watch") {
				continue // subresources; create-only reviews are not controllable
			}
			res, err := resolveResource(v1alpha1.ResourceRule{APIVersion: l.GroupVersion, Resource: r.Name}, fm)
			if gv, _ := schema.ParseGroupVersion(l.GroupVersion); err != nil && !clientgoscheme.Scheme.Recognizes(gv.WithKind(r.Kind)) {
				// Served by an API server newer than the linked client-go (opzero's
				// go.mod has the oldest it supports): offline, nothing knows it.
				newer = append(newer, l.GroupVersion+" "+r.Name)
				continue
			}
			if err != nil {
				t.Errorf("%s %s: %v", l.GroupVersion, r.Name, err)
				continue
			}
			if res.GVK.Kind != r.Kind || res.Namespaced != r.Namespaced {
				t.Errorf("%s %s: offline kind %s namespaced=%v, the API server says %s namespaced=%v",
					l.GroupVersion, r.Name, res.GVK.Kind, res.Namespaced, r.Kind, r.Namespaced)
			}
			checked++
		}
	}
	if len(newer) > 0 {
		t.Logf("not in the linked client-go's scheme, not resolved offline: %s", strings.Join(newer, ", "))
	}
	if checked < 40 {
		t.Fatalf("checked %d resources: discovery returned too few", checked)
	}
	// The case, without a cluster.
	res, err := resolveResource(v1alpha1.ResourceRule{APIVersion: "apiextensions.k8s.io/v1", Resource: "customresourcedefinitions"}, fm)
	if err != nil || res.GVK.Kind != "CustomResourceDefinition" || res.Namespaced {
		t.Fatalf("customresourcedefinitions offline: %+v, %v", res, err)
	}
}

func hasVerb(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

var _ Mapper = (*meta.DefaultRESTMapper)(nil)
