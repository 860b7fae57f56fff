package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

var knativeServices = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}

// addressTTL is how long a Knative Service's address is reused before it
// is read again (it only changes when the Service is made again).
const addressTTL = time.Minute

// serviceResolver reads a Knative Service's status.address.url and keeps
// it for addressTTL. Each operator has its own entry and lock: a slow read
// for one does not hold up another's calls.
type serviceResolver struct {
	dyn dynamic.Interface
	now func() time.Time

	mu      sync.Mutex
	entries map[types.NamespacedName]*address
}

type address struct {
	mu   sync.Mutex
	url  string
	read time.Time
}

var _ Resolver = (*serviceResolver)(nil)

func newServiceResolver(dyn dynamic.Interface) *serviceResolver {
	return &serviceResolver{dyn: dyn, now: time.Now, entries: map[types.NamespacedName]*address{}}
}

func (s *serviceResolver) entry(op types.NamespacedName) *address {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.entries[op]
	if a == nil {
		a = &address{}
		s.entries[op] = a
	}
	return a
}

func (s *serviceResolver) URL(ctx context.Context, op types.NamespacedName) (string, error) {
	a := s.entry(op)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.url != "" && s.now().Sub(a.read) < addressTTL {
		return a.url, nil
	}
	u, err := s.dyn.Resource(knativeServices).Namespace(op.Namespace).Get(ctx, op.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	url, _, _ := unstructured.NestedString(u.Object, "status", "address", "url")
	if url == "" {
		url, _, _ = unstructured.NestedString(u.Object, "status", "url")
	}
	if url == "" {
		return "", fmt.Errorf("Knative Service %s has no address yet (status.address.url)", op)
	}
	a.url, a.read = url, s.now()
	return url, nil
}

func (s *serviceResolver) Forget(op types.NamespacedName) {
	a := s.entry(op)
	a.mu.Lock()
	a.url = ""
	a.mu.Unlock()
}
