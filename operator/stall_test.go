package operator_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

// proxy is a TCP proxy in front of the API server. In mode "forward" it
// pipes connections through; "stall" accepts them and reads, but never
// answers (an API server that is overloaded or half dead); "refuse" closes
// them at once. Changing the mode closes the connections it holds, so
// pooled HTTP/2 connections do not keep the old mode.
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	mode  string
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, mode: "forward"}
	t.Cleanup(func() { l.Close(); p.set("refuse") })
	go p.serve()
	return p
}

// config is cfg aimed at the proxy (same certificate: both on 127.0.0.1).
func (p *proxy) config(t *testing.T, cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	u, err := url.Parse(c.Host)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.l.Addr().String()
	c.Host = u.String()
	return c
}

func (p *proxy) set(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) hold(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, cs...)
}

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		switch mode {
		case "refuse":
			c.Close()
		case "stall":
			p.hold(c)
			go func() { _, _ = io.Copy(io.Discard, c) }()
		default:
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.hold(c, up)
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}
}

// TestAPITimeoutDefault: zero means DefaultAPITimeout, a negative value no
// bound, and a Config's own Timeout is kept.
func TestAPITimeoutDefault(t *testing.T) {
	for _, tc := range []struct {
		opt, own, want time.Duration
	}{{0, 0, operator.DefaultAPITimeout}, {5 * time.Second, 0, 5 * time.Second}, {-1, 0, 0}, {0, 7 * time.Second, 7 * time.Second}} {
		got := operator.APIConfig(operator.Options{APITimeout: tc.opt}, &rest.Config{Host: "https://127.0.0.1:1", Timeout: tc.own}).Timeout
		if got != tc.want {
			t.Errorf("APITimeout %s, Config.Timeout %s: the client's timeout is %s, want %s", tc.opt, tc.own, got, tc.want)
		}
	}
}

// TestStalledAPIServer: the serverless runtime reaches the real API server
// through a proxy that starts to stall (accepts, never answers). An event
// whose reconcile reads the API server is answered 503 with Retry-After once
// --api-timeout (here 2 s) fires, rather than held until Knative's request
// timeout; once the proxy forwards again the same runtime answers 200.
func TestStalledAPIServer(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	px := startProxy(t, strings.TrimPrefix(strings.TrimPrefix(env.Config.Host, "https://"), "http://"))
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	rt, err := operator.New(operator.Options{Mode: operator.Serverless, Scheme: scheme, Config: px.config(t, env.Config), Addr: addr,
		InsecureNoAuth: true, APITimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reads := func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, client.IgnoreNotFound(rt.GetClient().Get(ctx, req.NamespacedName, &v1.ConfigWatcher{}))
	}
	if err := builder.ControllerManagedBy(rt).Named("stall-test").For(&v1.ConfigWatcher{}).Complete(reconcile.Func(reads)); err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, rt.Start)
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}, Spec: v1.ConfigWatcherSpec{ConfigMap: "c", PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	// The sender gives up long after the API timeout and long before the
	// engine's own bounds (MaxWait 4m30s, ReconcileTimeout 5m).
	sender := &http.Client{Timeout: 60 * time.Second}
	ping := func() (*http.Response, string) {
		t.Helper()
		data := fmt.Sprintf(`{"namespace":%q,"name":"w"}`, ns)
		req, err := cloudevent.NewRequest(context.Background(), "http://"+addr, cloudevent.NewPing("/apis/v1/namespaces/"+ns+"/pingsources/p", []byte(data)), false)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := sender.Do(req)
		if err != nil {
			t.Fatalf("the event was not answered: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	testkit.Eventually(t, 20*time.Second, "the runtime serving", func(context.Context) (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	})
	if resp, body := ping(); resp.StatusCode != http.StatusOK {
		t.Fatalf("before the stall: %d %s, want 200", resp.StatusCode, body)
	}

	px.set("stall")
	resp, body := ping()
	timedOut := strings.Contains(body, "Client.Timeout exceeded") || strings.Contains(body, "context deadline exceeded")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !timedOut {
		t.Fatalf("API server stalled: %d Retry-After %q %q, want 503 with Retry-After naming the client timeout", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	t.Logf("stalled: %d %s", resp.StatusCode, strings.TrimSpace(body))

	px.set("forward")
	if resp, body := ping(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the stall: %d %s, want 200 without a restart", resp.StatusCode, body)
	}
}

// TestClassicHealthzStuckInformer: a classic runtime runs as a
// ServiceAccount allowed to read ConfigWatchers on the real API server
// (through the proxy, which can cut its connections). Its read access is
// revoked and its watch made to reconnect: the informer's list fails
// (403) on every try, and once that has lasted the threshold (shortened to
// 3 s here; 2 min by default) /healthz fails, naming the informers check.
// Access back, the informer lists again and /healthz passes.
func TestClassicHealthzStuckInformer(t *testing.T) {
	defer operator.SetInformerStuckAfter(3 * time.Second)()
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	name := "opzero-test-healthz-" + ns
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "healthz"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"k8spatterns.io"}, Resources: []string{"configwatchers"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := func() *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "healthz", Namespace: ns}}}
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "healthz", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, strings.TrimPrefix(env.Config.Host, "https://"))
	cfg := rest.AnonymousClientConfig(px.config(t, env.Config))
	cfg.BearerToken = tok.Status.Token
	probe := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	rt, err := operator.New(operator.Options{Mode: operator.Classic, Scheme: scheme, Config: cfg, DisableLeaderElection: true, HealthProbeAddr: probe})
	if err != nil {
		t.Fatal(err)
	}
	var reconciled atomic.Int64
	count := func(context.Context, reconcile.Request) (reconcile.Result, error) {
		reconciled.Add(1)
		return reconcile.Result{}, nil
	}
	if err := builder.ControllerManagedBy(rt).Named("healthz-test").For(&v1.ConfigWatcher{}).Complete(reconcile.Func(count)); err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, rt.Start)
	// The informer runs once a reconcile came from it.
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}, Spec: v1.ConfigWatcherSpec{ConfigMap: "c", PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "a reconcile", func(context.Context) (bool, error) { return reconciled.Load() > 0, nil })
	health := func() (int, string) {
		resp, err := http.Get("http://" + probe + "/healthz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("/healthz with the informer running: %d %s, want 200", code, body)
	}

	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, body := 0, ""
	kicked := time.Time{}
	testkit.Eventually(t, time.Minute, "/healthz failing with the informer stuck", func(context.Context) (bool, error) {
		code, body = health()
		if code == http.StatusOK && time.Since(kicked) > 2*time.Second {
			px.set("forward") // cut its connections: the watch reconnects, and lists if it must
			kicked = time.Now()
		}
		return code == http.StatusInternalServerError && strings.Contains(body, "informers failed"), nil
	})
	t.Logf("stuck: %d %s", code, strings.TrimSpace(body))

	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Minute, "/healthz 200 again once the informer lists", func(context.Context) (bool, error) {
		code, body = health()
		return code == http.StatusOK, nil
	})
}
