package wakesource

import (
	"context"
	"sync"
	"time"
)

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
