package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
)

// The hub talks to the API server through client-go's dynamic and metadata
// clients only: no controller-runtime, no typed clientset, whose package
// initialization (every API type registered) costs an always-on process
// ~10 MiB and half its binary. This file is what it needs of the rest.

var (
	subscriptionsGVR       = v1alpha1.GroupVersion.WithResource("subscriptions")
	eventsGVR              = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	sarGVR                 = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "subjectaccessreviews"}
	errNoSuchKind          = fmt.Errorf("no such kind")
	discoveryRefreshPeriod = 10 * time.Second
)

// kinds maps kinds to resources from the API server's discovery of one
// group-version at a time (GET /api/v1, /apis/<group>/<version>), read
// again on a miss at most every 10 s (a CRD installed later is found).
type kinds struct {
	http *http.Client
	host string

	mu   sync.Mutex
	gvs  map[schema.GroupVersion]*metav1.APIResourceList
	read map[schema.GroupVersion]time.Time
}

func newKinds(cfg *rest.Config) (*kinds, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &kinds{http: hc, host: strings.TrimRight(cfg.Host, "/"), gvs: map[schema.GroupVersion]*metav1.APIResourceList{}, read: map[schema.GroupVersion]time.Time{}}, nil
}

// mapping returns gvk's resource and whether it is namespaced.
func (k *kinds) mapping(ctx context.Context, gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	gv := gvk.GroupVersion()
	for attempt := 0; attempt < 2; attempt++ {
		k.mu.Lock()
		l, at := k.gvs[gv], k.read[gv]
		k.mu.Unlock()
		if l != nil {
			for _, r := range l.APIResources {
				if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
					return gv.WithResource(r.Name), r.Namespaced, nil
				}
			}
		}
		if attempt == 1 || time.Since(at) < discoveryRefreshPeriod {
			break
		}
		if err := k.discover(ctx, gv); err != nil {
			return schema.GroupVersionResource{}, false, err
		}
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("%w: %s is not served (is its CRD installed?)", errNoSuchKind, gvk)
}

func (k *kinds) discover(ctx context.Context, gv schema.GroupVersion) error {
	path := "/apis/" + gv.String()
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.host+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.http.Do(req)
	if err != nil {
		return fmt.Errorf("discovering %s: %w", gv, err)
	}
	defer resp.Body.Close()
	l := &metav1.APIResourceList{}
	switch {
	case resp.StatusCode == http.StatusNotFound:
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("discovering %s: the API server answered %s", gv, resp.Status)
	default:
		if err := json.NewDecoder(resp.Body).Decode(l); err != nil {
			return fmt.Errorf("discovering %s: %w", gv, err)
		}
	}
	k.mu.Lock()
	k.gvs[gv], k.read[gv] = l, time.Now()
	k.mu.Unlock()
	return nil
}

// toSubscription converts what the dynamic client read. Fields this hub
// does not know (a Subscription written by a newer opzero, whose CRD
// already has them) are named in the annotation unknownFieldsAnnotation of
// the copy in memory (the hub writes only status): the Subscription is then
// refused with a condition that says to upgrade the hub, not served
// without them.
func toSubscription(u *unstructured.Unstructured) (*v1alpha1.Subscription, error) {
	s := &v1alpha1.Subscription{}
	err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, s, true)
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		var unknown []string
		for _, e := range strict.Errors() {
			f := strings.Trim(strings.TrimPrefix(e.Error(), "unknown field "), `"`)
			if !strings.HasPrefix(f, "metadata.") && !strings.HasPrefix(f, "status.") {
				unknown = append(unknown, f)
			}
		}
		if len(unknown) > 0 {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, unknownFieldsAnnotation, strings.Join(unknown, ", "))
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("Subscription %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return s, nil
}

// unknownFieldsAnnotation (in memory only) names the fields of a
// Subscription's spec this hub does not know.
const unknownFieldsAnnotation = "hub.opzero.dev/unknown-fields"

func keyOf(o metav1.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

// allowed asks a SubjectAccessReview.
func (h *Hub) allowed(ctx context.Context, user string, groups []string, ns, verb string, gvr schema.GroupVersionResource) (bool, error) {
	gs := make([]any, len(groups))
	for i, g := range groups {
		gs[i] = g
	}
	sar := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{"user": user, "groups": gs, "resourceAttributes": map[string]any{
			"namespace": ns, "verb": verb, "group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource}},
	}}
	out, err := h.dyn.Resource(sarGVR).Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	ok, _, _ := unstructured.NestedBool(out.Object, "status", "allowed")
	return ok, nil
}
