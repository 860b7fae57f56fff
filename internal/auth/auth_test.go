package auth_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/opzero/opzero/internal/auth"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{NoControllerManager: true}))
}

func token(t *testing.T, env *testenv.Env, ns, sa, audience string) string {
	t.Helper()
	ctx := context.Background()
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}
	_ = env.Client.Create(ctx, acct)
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: sa}, acct); err != nil {
		t.Fatal(err)
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)}}
	if err := env.Client.SubResource("token").Create(ctx, acct, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// expired re-signs a real token with the cluster's service-account key, its
// validity moved into the past: a token the cluster issued, now expired.
func expired(t *testing.T, env *testenv.Env, real string) string {
	t.Helper()
	parts := strings.Split(real, ".")
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour).Unix()
	claims["iat"], claims["nbf"], claims["exp"] = past, past, past+600
	payload, _ = json.Marshal(claims)
	keyPEM, err := os.ReadFile(filepath.Join(env.Dir, "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	signing := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestRealTokens: tokens from the control plane's TokenRequest API, checked
// by TokenReview: the right audience passes, a wrong audience or an expired
// token gets 401, a sender outside the allow-list 403; rejected deliveries
// never reach the operator.
func TestRealTokens(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	var reached atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached.Add(1); w.WriteHeader(200) })
	h := auth.Middleware(auth.Options{
		Authenticator: auth.NewTokenReviewer(env.Client, "my-operator", time.Minute),
		Allowed:       []string{"system:serviceaccount:" + ns + ":source"},
	}, next)
	good := token(t, env, ns, "source", "my-operator")
	cases := []struct {
		name   string
		header string
		code   int
		body   string
	}{
		{"right audience", "Bearer " + good, 200, ""},
		{"cached", "Bearer " + good, 200, ""},
		{"no header", "", 401, "missing or malformed"},
		{"not bearer", "Basic Zm9vOmJhcg==", 401, "missing or malformed"},
		{"garbage", "Bearer not-a-jwt", 401, "token rejected"},
		{"wrong audience", "Bearer " + token(t, env, ns, "source", "someone-else"), 401, "someone-else"},
		{"expired", "Bearer " + expired(t, env, good), 401, "expired"},
		{"outside the allow-list", "Bearer " + token(t, env, ns, "intruder", "my-operator"), 403, "not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := reached.Load()
			req := httptest.NewRequest(http.MethodPost, "/", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
				t.Fatalf("got %d %q, want %d mentioning %q", rec.Code, rec.Body.String(), tc.code, tc.body)
			}
			if passed := reached.Load() - before; (tc.code == 200) != (passed == 1) {
				t.Fatalf("%d deliveries reached the operator, want %v", passed, tc.code == 200)
			}
			if strings.Contains(rec.Body.String(), ":source") {
				t.Fatalf("the answer %q names the allowed sender: a caller learns nothing of other identities", rec.Body.String())
			}
			if tc.code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

// TestAPIServerDownIsNotAPass: when TokenReview fails, 503 (the sender
// retries), never a pass.
func TestAPIServerDownIsNotAPass(t *testing.T) {
	h := auth.Middleware(auth.Options{Authenticator: auth.AuthenticatorFunc(func(context.Context, string) (*auth.Identity, error) {
		return nil, context.DeadlineExceeded
	})}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Fatal("reached the operator") }))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("Authorization", "Bearer x.y.z")
	h.ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("got %d, want 503 with Retry-After", rec.Code)
	}
}
