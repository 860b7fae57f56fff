package wakesource

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TokenRequester returns a Token function that mints, with the TokenRequest
// API, a token of service account namespace/name for audience, as
// Knative's OIDC senders do, and reuses it until 80% of its lifetime has
// passed.
func TokenRequester(d dynamic.Interface, namespace, name, audience string) func(context.Context) (string, error) {
	serviceAccounts := schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	return ReuseToken(func(ctx context.Context) (string, time.Time, error) {
		tr := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
			"metadata": map[string]any{"name": name}, // the subresource's object (dynamic posts to its name)
			"spec":     map[string]any{"audiences": []any{audience}, "expirationSeconds": int64(3600)},
		}}
		out, err := d.Resource(serviceAccounts).Namespace(namespace).Create(ctx, tr, metav1.CreateOptions{}, "token")
		if err != nil {
			return "", time.Time{}, err
		}
		tok, _, _ := unstructured.NestedString(out.Object, "status", "token")
		exp, _, _ := unstructured.NestedString(out.Object, "status", "expirationTimestamp")
		t, err := time.Parse(time.RFC3339, exp)
		if tok == "" || err != nil {
			return "", time.Time{}, fmt.Errorf("the TokenRequest for %s/%s answered no token or expiry", namespace, name)
		}
		return tok, t, nil
	})
}

// ReuseToken returns a Token function that calls mint for a token and its
// expiry and reuses the token until 80% of its lifetime has passed, as
// Knative's OIDC senders reuse their TokenRequest tokens. Concurrent
// callers share one mint.
func ReuseToken(mint func(context.Context) (token string, expires time.Time, err error)) func(context.Context) (string, error) {
	var mu sync.Mutex
	var token string
	var renew time.Time
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if token != "" && time.Now().Before(renew) {
			return token, nil
		}
		tok, exp, err := mint(ctx)
		if err != nil {
			return "", err
		}
		token, renew = tok, time.Now().Add(time.Until(exp)*8/10)
		return token, nil
	}
}
