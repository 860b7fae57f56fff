package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/examples/configwatcher/controller"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

// discoveryPath is a group-version's discovery: /api/v1, /apis/<g>/<v>.
var discoveryPath = regexp.MustCompile(`^/api/v1$|^/apis/[^/]+/[^/]+$`)

// gatedAPI records the paths of the API requests it carries and holds the
// discovery requests until open is closed.
type gatedAPI struct {
	next  http.RoundTripper
	open  chan struct{}
	mu    sync.Mutex
	paths []string
	held  int // discovery requests waiting for open
}

func (g *gatedAPI) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	g.paths = append(g.paths, r.Method+" "+r.URL.Path)
	disc := discoveryPath.MatchString(r.URL.Path)
	if disc {
		g.held++
	}
	g.mu.Unlock()
	if disc {
		<-g.open
	}
	return g.next.RoundTrip(r)
}

func (g *gatedAPI) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.paths)
}

func (g *gatedAPI) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// TestWarmBeforeFirstEvent: a serverless operator's listener answers its
// probe while the API discovery is still held, and that discovery (the
// group-versions of its kinds, Events, and the TokenReview's when it
// authenticates) is made once listening, before any event: the first
// event's reconcile then makes no discovery call of its own.
func TestWarmBeforeFirstEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  operator.Options
		first string // the first discovery: what the first event needs first
		want  []string
	}{
		{name: "insecure-no-auth", opts: operator.Options{InsecureNoAuth: true}, first: "GET /apis/k8spatterns.io/v1",
			want: []string{"GET /apis/k8spatterns.io/v1", "GET /api/v1", "GET /apis/events.k8s.io/v1"}},
		{name: "authenticated, several instances", opts: operator.Options{Audience: "warm-test", MaxScale: 3}, first: "GET /apis/authentication.k8s.io/v1",
			want: []string{"GET /apis/authentication.k8s.io/v1", "GET /apis/k8spatterns.io/v1", "GET /api/v1",
				"GET /apis/coordination.k8s.io/v1", "GET /apis/events.k8s.io/v1"}},
		// Unbounded (the manifests' OPZERO_MAX_SCALE=-1 for WithScale(min, 0)):
		// several instances too, so Leases.
		{name: "unbounded instances", opts: operator.Options{InsecureNoAuth: true, MaxScale: -1}, first: "GET /apis/k8spatterns.io/v1",
			want: []string{"GET /apis/k8spatterns.io/v1", "GET /api/v1", "GET /apis/coordination.k8s.io/v1", "GET /apis/events.k8s.io/v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Get(t)
			ns := env.Namespace(t)
			gate := &gatedAPI{open: make(chan struct{})}
			cfg := rest.CopyConfig(env.Config)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { gate.next = rt; return gate })
			addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
			o := tc.opts
			o.Mode, o.Scheme, o.Config, o.Addr, o.WakeupNamespace = operator.Serverless, scheme, cfg, addr, ns
			rt, err := operator.New(o)
			if err != nil {
				t.Fatal(err)
			}
			rec := rt.GetEventRecorder("warm-test")
			err = builder.ControllerManagedBy(rt).For(&v1.ConfigWatcher{}).
				Watches(&corev1.ConfigMap{}, controller.ConfigMapToConfigWatchers).
				Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
					cw := &v1.ConfigWatcher{}
					if err := rt.GetClient().Get(ctx, req.NamespacedName, cw); err != nil {
						return reconcile.Result{}, err
					}
					rec.Eventf(cw, nil, corev1.EventTypeNormal, "Seen", "Reconcile", "seen")
					return reconcile.Result{}, nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(gate.seen()); n != 0 {
				t.Fatalf("API requests before Start: %v", gate.seen())
			}
			testkit.Background(t, rt.Start)

			testkit.Eventually(t, 30*time.Second, "/healthz answered while the discovery is held", func(ctx context.Context) (bool, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false, err
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK, fmt.Errorf("/healthz: %d", resp.StatusCode)
			})
			testkit.Eventually(t, 30*time.Second, "the discovery started once listening", func(context.Context) (bool, error) {
				return gate.waiting() > 0, nil
			})
			if got := gate.seen(); got[0] != tc.first {
				t.Errorf("first API request %q, want %q (what the first event needs first)", got[0], tc.first)
			}
			close(gate.open)
			testkit.Eventually(t, 30*time.Second, "every group-version discovered", func(context.Context) (bool, error) {
				got := gate.seen()
				for _, w := range tc.want {
					if !slices.Contains(got, w) {
						return false, fmt.Errorf("requests %v, want %v among them", got, tc.want)
					}
				}
				return true, nil
			})
			if !tc.opts.InsecureNoAuth {
				return // an event needs a sender's token: the discovery is what this case checks
			}

			// The first event: its reconcile's calls find every mapping known.
			cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: ns}, Spec: v1.ConfigWatcherSpec{ConfigMap: "c", PodSelector: map[string]string{"a": "b"}}}
			if err := env.Client.Create(context.Background(), cw); err != nil {
				t.Fatal(err)
			}
			cw.TypeMeta = metav1.TypeMeta{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher"} // the create cleared it
			b, err := json.Marshal(cw)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Add, b, "configwatchers")
			if err != nil {
				t.Fatal(err)
			}
			before := len(gate.seen())
			req, err := cloudevent.NewRequest(context.Background(), "http://"+addr, ev, false)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the first event answered %d", resp.StatusCode)
			}
			after := gate.seen()[before:]
			for _, p := range after {
				if _, path, _ := strings.Cut(p, " "); discoveryPath.MatchString(path) {
					t.Errorf("the first event's reconcile made a discovery call %s (its requests: %v)", p, after)
				}
			}
			// (its Get is answered from the event's object: the Event is its call)
			if w := "POST /apis/events.k8s.io/v1/namespaces/" + ns + "/events"; !slices.Contains(after, w) {
				t.Errorf("the first event's requests %v, want %s among them", after, w)
			}
		})
	}
}
