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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if err := builder.ControllerManagedBy(rt).For(&v1.ConfigWatcher{}).Complete(reconcile.Func(reads)); err != nil {
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
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "Timeout") {
		t.Fatalf("API server stalled: %d Retry-After %q %q, want 503 with Retry-After naming the client timeout", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	t.Logf("stalled: %d %s", resp.StatusCode, strings.TrimSpace(body))

	px.set("forward")
	if resp, body := ping(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the stall: %d %s, want 200 without a restart", resp.StatusCode, body)
	}
}

// TestClassicHealthzStuckInformer: a classic runtime reaches the real API
// server through a proxy that starts to refuse connections; once its
// informers have failed to list or watch for the threshold (shortened to
// 3 s here; 2 min by default), /healthz fails and names the informers
// check; once the proxy forwards again and the informers list, it passes
// again.
func TestClassicHealthzStuckInformer(t *testing.T) {
	if !operator.ClassicAvailable {
		t.Skip("built with -tags opzero_serverless")
	}
	defer operator.SetInformerStuckAfter(3 * time.Second)()
	env := testenv.Get(t)
	px := startProxy(t, strings.TrimPrefix(env.Config.Host, "https://"))
	probe := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	rt, err := operator.New(operator.Options{Mode: operator.Classic, Scheme: scheme, Config: px.config(t, env.Config),
		DisableLeaderElection: true, HealthProbeAddr: probe})
	if err != nil {
		t.Fatal(err)
	}
	var reconciled atomic.Int64
	count := func(context.Context, reconcile.Request) (reconcile.Result, error) { reconciled.Add(1); return reconcile.Result{}, nil }
	if err := builder.ControllerManagedBy(rt).For(&v1.ConfigWatcher{}).Complete(reconcile.Func(count)); err != nil {
		t.Fatal(err)
	}
	testkit.Background(t, rt.Start)
	// The informer runs once a reconcile came from it.
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: env.Namespace(t)}, Spec: v1.ConfigWatcherSpec{ConfigMap: "c", PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(context.Background(), cw); err != nil {
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
	code, body := 0, ""
	testkit.Eventually(t, 30*time.Second, "/healthz 200 with the API server there", func(context.Context) (bool, error) {
		code, body = health()
		return code == http.StatusOK, nil
	})
	px.set("refuse")
	testkit.Eventually(t, time.Minute, "/healthz failing with the informers stuck", func(context.Context) (bool, error) {
		code, body = health()
		return code == http.StatusInternalServerError && strings.Contains(body, "informers failed"), nil
	})
	t.Logf("stuck: %d %s", code, strings.TrimSpace(body))
	px.set("forward")
	testkit.Eventually(t, 2*time.Minute, "/healthz 200 again once the informers list", func(context.Context) (bool, error) {
		code, body = health()
		return code == http.StatusOK, nil
	})
}
