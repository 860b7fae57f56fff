package operator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/operator/classic"
	"github.com/opzero/opzero/testenv"
)

// TestAdoptedManagerServesWebhooksServerless: serverless, the handlers a
// project registers on its webhook server (admission and /convert) are
// served on the serverless port at their paths, behind the same
// authentication as the events: without a token the handler is not
// called (401), with a token of the operator's audience it answers.
// A ready check on the webhook server's StartedChecker passes.
func TestAdoptedManagerServesWebhooksServerless(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	mgr, err := classic.NewManager(operator.Options{Addr: addr, Audience: "opzero:" + ns + ":webhooks"}, env.Config, manager.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&kubebuilderStyle{Client: mgr.GetClient(), count: map[string]int{}}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	called := func(p string) int { mu.Lock(); defer mu.Unlock(); return calls[p] }
	for _, p := range []string{"/validate-x", "/convert"} {
		mgr.GetWebhookServer().Register(p, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			calls[p]++
			mu.Unlock()
			fmt.Fprint(w, "answered "+p)
		}))
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		t.Fatal(err)
	}
	var _ healthz.Checker = mgr.GetWebhookServer().StartedChecker()
	testkit.Background(t, mgr.Start)
	testkit.Eventually(t, 30*time.Second, "the serverless port ready", func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})

	post := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post("/validate-x", ""); code != http.StatusUnauthorized || called("/validate-x") != 0 {
		t.Fatalf("without a token: %d, handler called %d times; want 401 and not called", code, called("/validate-x"))
	}
	if code, _ := post("/validate-x", saToken(t, env, ns, "other-audience")); code != http.StatusUnauthorized || called("/validate-x") != 0 {
		t.Fatalf("with a token of another audience: %d, handler called %d times; want 401 and not called", code, called("/validate-x"))
	}
	tok := saToken(t, env, ns, "opzero:"+ns+":webhooks")
	for _, p := range []string{"/validate-x", "/convert"} {
		if code, body := post(p, tok); code != 200 || body != "answered "+p || called(p) != 1 {
			t.Fatalf("%s with the operator's audience: %d %q (called %d), want 200 from its handler", p, code, body, called(p))
		}
	}
}

// saToken is a TokenRequest token of service account "sender" in ns.
func saToken(t *testing.T, env *testenv.Env, ns, audience string) string {
	t.Helper()
	ctx := context.Background()
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sender", Namespace: ns}}
	_ = env.Client.Create(ctx, acct)
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)}}
	if err := env.Client.SubResource("token").Create(ctx, acct, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
