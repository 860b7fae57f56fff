package wakeup_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/devenv/balancer"
	"github.com/opzero/opzero/internal/devenv/knative"
	"github.com/opzero/opzero/internal/engine/serverless"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/spanlog"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// sender is the event path of the chaos test: Knative's real
// ApiServerSource adapter, through a proxy that drops 10% of events and
// balances round robin over the instances (the live ones: a refused
// connection tries the next). It counts what passed.
type sender struct {
	stop func() // the adapter's, or the hub's ($CHAOS_SOURCE=hub)
	// seen: events the adapter sent; dropped: of those, lost on purpose;
	// passed: answered by an instance; admitted: of those, answered at
	// admission; forwarded: answered by the instance holding the key's
	// Lease, which another one forwarded the event to.
	seen, dropped, passed, admitted, forwarded atomic.Int64
}

func startSender(t *testing.T, env *testenv.Env, ns, name string, backends []string) *sender {
	s := &sender{}
	lb := balancer.New(backends...)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.seen.Add(1)
		if rand.IntN(10) == 0 {
			s.dropped.Add(1)
			io.Copy(io.Discard, r.Body)
			return // "delivered": the event is lost
		}
		rec := httptest.NewRecorder()
		lb.ServeHTTP(rec, r)
		if rec.Code != http.StatusBadGateway { // no instance answered
			s.passed.Add(1)
		}
		if strings.HasPrefix(rec.Header().Get("Opzero-Result"), "admitted") {
			s.admitted.Add(1)
		}
		if rec.Header().Get(serverless.HolderHeader) != "" { // the answer of the key's holder
			s.forwarded.Add(1)
		}
		w.WriteHeader(rec.Code)
	}))
	t.Cleanup(proxy.Close)
	if os.Getenv("CHAOS_SOURCE") == "hub" {
		s.stop = startHub(t, env, ns, proxy.URL)
		return s
	}
	a, err := knative.StartApiServerSource(context.Background(), knative.ApiServerSourceConfig{
		Name: name, Namespaces: []string{ns}, Mode: "Resource", Sink: proxy.URL, Kubeconfig: env.Kubeconfig,
		Resources: []knative.Resource{{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	s.stop = a.Stop
	return s
}

// startHub feeds sink through the opzero hub instead: a Subscription to
// the namespace's ConfigWatchers in Resource mode, as --source=hub writes
// it, served by a hub in this process. It returns once the Subscription is
// Ready.
func startHub(t *testing.T, env *testenv.Env, ns, sink string) (stop func()) {
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chaos-op"}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "chaos-op-" + ns},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa.Name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"}}
	sub := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chaos"},
		Spec: v1alpha1.SubscriptionSpec{Operator: "chaos", ServiceAccountName: sa.Name, Sink: v1alpha1.Destination{URI: sink},
			Resources: []v1alpha1.SubscribedResource{{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Mode: v1alpha1.ModeResource, Namespaces: []string{ns}}}}}
	for _, o := range []client.Object{sa, crb, sub} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
	h, err := hub.New(env.Config, hub.Options{NoWakeups: true, Log: logr.FromSlogHandler(slog.NewTextHandler(testkit.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(hctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	testkit.Eventually(t, 30*time.Second, "the hub's Subscription Ready", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sub), sub); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(sub.Status.Conditions, v1alpha1.SubscriptionReady), nil
	})
	return stop
}

// fleet is the operator's instances, each restarted on its own port after
// a kill, writing their reconciles to one span log.
type fleet struct {
	t     *testing.T
	env   *testenv.Env
	ns    string // the Leases' too
	args  []string
	vars  []string // their environment
	urls  []string
	spans string

	mu     sync.Mutex
	cur    []*testkit.Child
	deaths map[int]time.Time // pid -> when it was killed
}

func newFleet(t *testing.T, env *testenv.Env, ns string, c chaosConfig) *fleet {
	f := &fleet{t: t, env: env, ns: ns, spans: filepath.Join(t.TempDir(), "spans"), cur: make([]*testkit.Child, c.instances), deaths: map[int]time.Time{},
		args: []string{"--mode=serverless", "--insecure-no-auth", "--answer=" + c.answer}}
	f.vars = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "TESTOP_SPANS="+f.spans, "POD_NAMESPACE="+ns)
	if c.instances > 1 {
		f.args = append(f.args, fmt.Sprintf("--max-scale=%d", c.instances), "--lease-duration="+leaseDuration.String())
	}
	for range c.instances {
		f.urls = append(f.urls, fmt.Sprintf("http://127.0.0.1:%d", testkit.FreePort(t)))
	}
	return f
}

func (f *fleet) startAll() {
	for i := range f.urls {
		f.start(i)
	}
}

// start runs instance i on its port; in a fleet, it advertises its URL.
func (f *fleet) start(i int) {
	_, port, _ := strings.Cut(strings.TrimPrefix(f.urls[i], "http://"), ":")
	cmd := exec.Command(testop, f.args...)
	cmd.Env = append(slices.Clip(f.vars), "PORT="+port)
	if len(f.urls) > 1 {
		cmd.Env = append(cmd.Env, "OPZERO_ADVERTISE_ADDRESS="+f.urls[i])
	}
	c, err := testkit.StartChild(f.t, cmd, f.urls[i]+"/healthz", 20*time.Second)
	if err != nil {
		f.t.Error(err)
		return
	}
	f.mu.Lock()
	f.cur[i] = c
	f.mu.Unlock()
}

// restart SIGKILLs instance i and starts it again on its port.
func (f *fleet) restart(i int) {
	f.mu.Lock()
	c := f.cur[i]
	f.mu.Unlock()
	if c != nil {
		c.Kill()
		f.mu.Lock()
		f.deaths[c.Cmd.Process.Pid] = time.Now()
		f.mu.Unlock()
	}
	f.start(i)
}

// dead: holder (a Lease's, host name-pid) is a killed instance.
func (f *fleet) dead(holder *string) bool {
	if holder == nil {
		return false
	}
	pid, err := strconv.Atoi((*holder)[strings.LastIndex(*holder, "-")+1:])
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.deaths[pid]
	return err == nil && ok
}

// waitDeadLeasesExpire waits until the Leases the killed instances held
// have expired.
func (f *fleet) waitDeadLeasesExpire() {
	testkit.Eventually(f.t, 2*leaseDuration+10*time.Second, "the killed instances' Leases expire", func(ctx context.Context) (bool, error) {
		ls, err := f.leases(ctx)
		for _, l := range ls {
			if f.dead(l.Spec.HolderIdentity) && l.Spec.RenewTime != nil && time.Now().Before(l.Spec.RenewTime.Add(leaseDuration)) {
				return false, err
			}
		}
		return err == nil, err
	})
}

// noDeadHolder: the sweep took over every Lease the killed instances held
// (all expired before it); none is left to expire later, unhealed.
func (f *fleet) noDeadHolder() {
	ls, err := f.leases(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range ls {
		if f.dead(l.Spec.HolderIdentity) {
			f.t.Errorf("after the sweep, %s is still held by a killed instance: %s renewed %v annotations %v", l.Name, ptrOr(l.Spec.HolderIdentity), l.Spec.RenewTime, l.Annotations)
		}
	}
}

// noLeaseLeft waits until the live instances have released the Leases they
// kept, once idle. Each release is a write to an API server this machine
// shares, after the sweep's reconciles (one per key it named): a generous
// bound.
func (f *fleet) noLeaseLeft() {
	start := time.Now()
	if err := testkit.Poll(context.Background(), 30*time.Second, func(ctx context.Context) (bool, error) {
		ls, err := f.leases(ctx)
		return err == nil && len(ls) == 0, err
	}); err != nil {
		ls, _ := f.leases(context.Background())
		for _, l := range ls[:min(len(ls), 20)] {
			f.t.Logf("left: %s holder %s renewed %v annotations %v", l.Name, ptrOr(l.Spec.HolderIdentity), l.Spec.RenewTime, l.Annotations)
		}
		f.t.Fatalf("%d Leases left after the sweep: %v", len(ls), err)
	}
	f.t.Logf("no Lease left %s after the checks", time.Since(start).Round(100*time.Millisecond))
}

func (f *fleet) leases(ctx context.Context) ([]coordinationv1.Lease, error) {
	list := &coordinationv1.LeaseList{}
	err := f.env.Client.List(ctx, list, client.InNamespace(f.ns))
	return list.Items, err
}

// killRandomly SIGKILLs a random instance every ~2 s and restarts it on
// its port, until stop is called; kills counts them.
func (f *fleet) killRandomly() (kills *atomic.Int32, stop func()) {
	kills = new(atomic.Int32)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(time.Duration(1500+rand.IntN(1000)) * time.Millisecond):
			}
			f.restart(rand.IntN(len(f.urls)))
			kills.Add(1)
		}
	}()
	return kills, func() { close(quit); <-done }
}

func (f *fleet) waitUp() {
	for _, u := range f.urls {
		testkit.Eventually(f.t, 10*time.Second, "operator up", func(context.Context) (bool, error) {
			resp, err := http.Get(u + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil, nil
		})
	}
}

// overlaps counts overlapping reconciles of one key in the span log.
func (f *fleet) overlaps() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	runs, err := spanlog.Read(f.spans, f.deaths)
	if err != nil {
		f.t.Fatal(err)
	}
	return spanlog.Overlaps(runs, f.t.Logf)
}

func ptrOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
