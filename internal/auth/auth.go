package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Identity is an authenticated sender.
type Identity struct {
	Username string // system:serviceaccount:<ns>:<name> for Knative senders
	Groups   []string
}

// Authenticator verifies a bearer token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (*Identity, error)
}

// AuthenticatorFunc adapts a function.
type AuthenticatorFunc func(ctx context.Context, token string) (*Identity, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, token string) (*Identity, error) {
	return f(ctx, token)
}

// Rejected is a token the API server did not accept: answered 401.
type Rejected struct{ Reason string }

func (r *Rejected) Error() string { return "token rejected: " + r.Reason }

// TokenReviewer authenticates with the TokenReview API for one audience.
type TokenReviewer struct {
	c        client.Client
	audience string
	ttl      time.Duration
	now      func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	id      *Identity
	expires time.Time
}

const maxCached = 10_000

// NewTokenReviewer checks tokens for audience with TokenReviews created
// through c; accepted tokens are remembered up to ttl (or their expiry).
func NewTokenReviewer(c client.Client, audience string, ttl time.Duration) *TokenReviewer {
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	return &TokenReviewer{c: c, audience: audience, ttl: ttl, now: time.Now, cache: map[[32]byte]cached{}}
}

var _ Authenticator = (*TokenReviewer)(nil)

// Authenticate reviews token; a *Rejected error means 401, any other error
// means the API server could not answer.
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (*Identity, error) {
	key := sha256.Sum256([]byte(token))
	now := r.now()
	r.mu.Lock()
	if c, ok := r.cache[key]; ok && now.Before(c.expires) {
		r.mu.Unlock()
		return c.id, nil
	}
	r.mu.Unlock()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.audience}}}
	if err := r.c.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		reason := tr.Status.Error
		if reason == "" {
			reason = "not authenticated"
		}
		return nil, &Rejected{Reason: reason + " (want a service-account token for audience " + r.audience + ")"}
	}
	if !contains(tr.Status.Audiences, r.audience) {
		return nil, &Rejected{Reason: fmt.Sprintf("token audiences %v do not include %s", tr.Status.Audiences, r.audience)}
	}
	id := &Identity{Username: tr.Status.User.Username, Groups: tr.Status.User.Groups}
	r.remember(key, id, now, token)
	return id, nil
}

func (r *TokenReviewer) remember(key [32]byte, id *Identity, now time.Time, token string) {
	until := now.Add(r.ttl)
	if exp, ok := expiry(token); ok && exp.Before(until) {
		until = exp
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxCached {
		for k, c := range r.cache {
			if !now.Before(c.expires) || len(r.cache) >= maxCached {
				delete(r.cache, k)
			}
		}
	}
	r.cache[key] = cached{id: id, expires: until}
}

// expiry reads the exp claim of a JWT the API server has just verified.
func expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Options configures Middleware.
type Options struct {
	Authenticator Authenticator
	// Allowed, if not empty, lists the usernames that may send events
	// (system:serviceaccount:<ns>:<name>).
	Allowed []string
	Log     logr.Logger
}

// Middleware rejects deliveries without a valid bearer token (see the package
// documentation) before they reach next.
func Middleware(o Options, next http.Handler) http.Handler {
	allowed := map[string]bool{}
	for _, a := range o.Allowed {
		allowed[a] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			unauthorized(w, "missing or malformed Authorization header: want `Bearer <token>` (Knative's OIDC feature sends one)")
			return
		}
		id, err := o.Authenticator.Authenticate(r.Context(), token)
		var rej *Rejected
		switch {
		case errors.As(err, &rej):
			unauthorized(w, rej.Error())
			return
		case err != nil:
			o.Log.Error(err, "cannot authenticate a delivery")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "cannot verify the token now: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if len(allowed) > 0 && !allowed[id.Username] {
			// Who is allowed goes to the operator's log, not to the sender:
			// the answer tells a caller nothing about other identities.
			o.Log.Info("refused a delivery from a sender not in --allowed-senders", "sender", id.Username, "allowed", strings.Join(o.Allowed, ", "))
			http.Error(w, fmt.Sprintf("sender %s is not allowed to deliver events here (the operator's --allowed-senders does not name it)", id.Username), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="opzero", error="invalid_token"`)
	http.Error(w, "unauthenticated: "+msg, http.StatusUnauthorized)
}
