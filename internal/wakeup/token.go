package wakeup

import (
	"context"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// TokenRequester returns a Token function that mints, with the TokenRequest
// API, a token of service account namespace/name for audience, as Knative's
// OIDC senders do, and reuses it until 80% of its lifetime has passed.
func TokenRequester(c client.Client, namespace, name, audience string) func(context.Context) (string, error) {
	return wakesource.ReuseToken(func(ctx context.Context) (string, time.Time, error) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600)}}
		if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
			return "", time.Time{}, err
		}
		return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
	})
}
