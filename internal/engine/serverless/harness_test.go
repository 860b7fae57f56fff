package serverless_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/builder"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/standin"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"testdata/crds", "../../../config/crd"}, Scheme: scheme}))
}

var widgetGVK = schema.GroupVersionKind{Group: "test.opzero.dev", Version: "v1", Kind: "Widget"}

func newWidget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "size")
	return u
}

// probe is an instrumented reconciler: it records every reconcile's span,
// counts overlapping reconciles of one key, and can block or fail on demand.
type probe struct {
	mu       sync.Mutex
	running  map[reconcile.Request]int
	spans    map[reconcile.Request][]span
	overlaps atomic.Int64
	calls    atomic.Int64
	atOnce   atomic.Int64           // reconciles in progress, all keys
	most     atomic.Int64           // the most atOnce has been
	started  chan reconcile.Request // receives each start when not nil
	gate     chan struct{}          // each reconcile waits for a value when not nil
	result   func(reconcile.Request, int) (reconcile.Result, error)
	c        client.Client
}

type span struct{ start, end time.Time }

func newProbe() *probe {
	return &probe{running: map[reconcile.Request]int{}, spans: map[reconcile.Request][]span{}}
}

func (p *probe) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	n := int(p.calls.Add(1))
	for now := p.atOnce.Add(1); ; {
		if most := p.most.Load(); now <= most || p.most.CompareAndSwap(most, now) {
			break
		}
	}
	defer p.atOnce.Add(-1)
	p.mu.Lock()
	p.running[req]++
	if p.running[req] > 1 {
		p.overlaps.Add(1)
	}
	start := time.Now()
	p.mu.Unlock()
	if p.started != nil {
		p.started <- req
	}
	if p.gate != nil {
		<-p.gate
	}
	if p.c != nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(widgetGVK)
		_ = p.c.Get(ctx, req.NamespacedName, u)
	}
	var res reconcile.Result
	var err error
	if p.result != nil {
		res, err = p.result(req, n)
	}
	p.mu.Lock()
	p.running[req]--
	p.spans[req] = append(p.spans[req], span{start, time.Now()})
	p.mu.Unlock()
	return res, err
}

func (p *probe) spansOf(req reconcile.Request) []span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]span(nil), p.spans[req]...)
}

// countingTransport counts every request the engine's client makes, and
// keeps each one's method and path.
type countingTransport struct {
	next  http.RoundTripper
	calls atomic.Int64
	mu    sync.Mutex
	made  []string // "GET /apis/..."
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	c.mu.Lock()
	c.made = append(c.made, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// since returns the requests made after the first n.
func (c *countingTransport) since(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.made[n:]...)
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.made)
}

type harness struct {
	t      *testing.T
	env    *testenv.Env
	ns     string
	engine *serverless.Engine
	client client.Client // the engine's (recstate-wrapped) client
	api    *countingTransport
	srv    *httptest.Server
	op     *builder.Controller
}

// mustEngine replaces the harness's engine (same operator) with one built with opts.
func mustEngine(t *testing.T, h *harness, opts serverless.Options) *serverless.Engine {
	t.Helper()
	e, err := serverless.New(h.op, h.client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newHarness(t *testing.T, r reconcile.Reconciler, describe func(*builder.Builder) *builder.Builder, opts serverless.Options) *harness {
	t.Helper()
	env := testenv.Get(t)
	h := &harness{t: t, env: env, ns: env.Namespace(t), api: &countingTransport{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { h.api.next = rt; return h.api }
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	h.client = standin.NewClient(c)
	if p, ok := r.(*probe); ok && p.c == nil {
		p.c = h.client
	}
	b := builder.New(env.Scheme).For(newWidget("", ""))
	if describe != nil {
		b = describe(b)
	}
	op, err := b.Build(r)
	if err != nil {
		t.Fatal(err)
	}
	h.op = op
	if h.engine, err = serverless.New(op, h.client, opts); err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.engine.ServeHTTP(w, r) }))
	t.Cleanup(h.srv.Close)
	return h
}

// objectJSON is obj as a watch delivers it: with apiVersion and kind.
func objectJSON(t *testing.T, obj client.Object) []byte {
	t.Helper()
	obj = obj.DeepCopyObject().(client.Object)
	gvk, err := apiutil.GVKForObject(obj, testenv.Get(t).Scheme)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (h *harness) event(mode cloudevent.Mode, action cloudevent.Action, obj client.Object, plural string) *event.Event {
	h.t.Helper()
	ev, err := cloudevent.NewObjectEvent(mode, action, objectJSON(h.t, obj), plural)
	if err != nil {
		h.t.Fatal(err)
	}
	return ev
}

type answer struct {
	code   int
	body   string
	result string
	sent   time.Time
	done   time.Time
}

func (h *harness) post(ev *event.Event, structured bool) answer {
	req, err := cloudevent.NewRequest(context.Background(), h.srv.URL, ev, structured)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.do(req)
}

func (h *harness) do(req *http.Request) answer {
	a := answer{sent: time.Now()}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Errorf("POST: %v", err)
		return a
	}
	defer resp.Body.Close()
	var buf [4096]byte
	n, _ := resp.Body.Read(buf[:])
	a.code, a.body, a.result, a.done = resp.StatusCode, string(buf[:n]), resp.Header.Get(serverless.ResultHeader), time.Now()
	return a
}

func (h *harness) create(obj client.Object) {
	h.t.Helper()
	if err := h.env.Client.Create(context.Background(), obj); err != nil {
		h.t.Fatal(err)
	}
}

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}
}
