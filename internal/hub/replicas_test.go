package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/hub/bucket"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// replica is one hub process of a test: its requests, to the API server
// and to the sinks, go through a switch that kill cuts, as SIGKILL would
// (nothing more is written: no progress, no release).
type replica struct {
	name   string
	h      *hub.Hub
	cut    atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
	logs   *syncBuf

	mu       sync.Mutex
	requests []string // "METHOD path?query" of every request to the API server
}

// requested lists the requests to the API server whose "METHOD
// path?query" contains each of parts.
func (r *replica) requested(parts ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.requests {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(q, p)
		}
		if all {
			out = append(out, q)
		}
	}
	return out
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type cutTransport struct {
	rt     http.RoundTripper
	r      *replica
	onSend func(r *replica, req *http.Request)
	record bool // in r.requests
}

func (c cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.r.cut.Load() {
		return nil, errors.New("killed")
	}
	if c.record {
		c.r.mu.Lock()
		c.r.requests = append(c.r.requests, req.Method+" "+req.URL.RequestURI())
		c.r.mu.Unlock()
	}
	if c.onSend != nil {
		c.onSend(c.r, req)
	}
	if c.r.cut.Load() { // killed by onSend (a fleet's before hook)
		return nil, errors.New("killed")
	}
	return c.rt.RoundTrip(req)
}

// fleet is the replicas of one test, sharing the Leases in one namespace.
type fleet struct {
	t       *testing.T
	leaseNS string
	buckets int

	mu         sync.Mutex
	replicas   []*replica
	violations []string // status writes while another live replica held the bucket
	writes     int
	// before, if set, sees each request to the API server before it is
	// sent; it may cut the replica (r.cut) so that the request is not.
	before func(r *replica, req *http.Request)
}

func newFleet(t *testing.T, buckets int) *fleet {
	return &fleet{t: t, leaseNS: testenv.Get(t).Namespace(t), buckets: buckets}
}

// preassign writes bucket i's Lease as held by holder, just renewed: the
// replica of that name takes it at its first try (its own), the others
// wait for it to expire. Two replicas started after it split the buckets
// as assigned.
func (f *fleet) preassign(i int, holder string) {
	env := testenv.Get(f.t)
	l := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"namespace": f.leaseNS, "name": bucket.LeaseName(hub.LeasePrefix, i),
			"annotations": map[string]any{bucket.VersionAnnotation: hub.BuildVersion(), bucket.BucketsAnnotation: fmt.Sprint(f.buckets)}},
		"spec": map[string]any{"holderIdentity": holder, "leaseDurationSeconds": int64(10),
			"renewTime": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")}}}
	_, err := dynamic.NewForConfigOrDie(env.Config).Resource(leasesGVR).Namespace(f.leaseNS).Create(context.Background(), l, metav1.CreateOptions{})
	must(f.t, err)
}

var leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// start runs a replica until the test ends.
func (f *fleet) start(name string, o hub.Options) *replica {
	t := f.t
	env := testenv.Get(t)
	r := &replica{name: name, done: make(chan struct{}), logs: &syncBuf{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return cutTransport{rt: rt, r: r, onSend: f.statusWrite, record: true}
	})
	o.LeaseNamespace, o.Buckets, o.ReplicaID = f.leaseNS, f.buckets, name
	if o.Recheck == 0 {
		o.Recheck = time.Second
	}
	if o.Flush == 0 {
		o.Flush = 200 * time.Millisecond
	}
	o.NoWakeups = true
	o.HTTP = &http.Client{Transport: cutTransport{rt: http.DefaultTransport.(*http.Transport).Clone(), r: r}, Timeout: 30 * time.Second}
	o.Log = logr.FromSlogHandler(slog.NewTextHandler(io.MultiWriter(testkit.LogWriter(t), r.logs), nil))
	h, err := hub.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); _ = h.Run(ctx) }()
	f.mu.Lock()
	f.replicas = append(f.replicas, r)
	f.mu.Unlock()
	t.Cleanup(r.stop)
	return r
}

// stop is SIGTERM: the replica hands its buckets over.
func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// kill is SIGKILL: nothing more leaves the replica.
func (r *replica) kill() {
	r.cut.Store(true)
	r.cancel()
	<-r.done
}

// ready waits for /readyz to answer 200.
func (r *replica) ready(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, r.name+" ready", func(context.Context) (bool, error) {
		rec := httptest.NewRecorder()
		r.h.ReadyHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code == http.StatusOK, nil
	})
}

func (r *replica) held() []int {
	var out []int
	for _, b := range r.h.Buckets() {
		if b.Held {
			out = append(out, b.Bucket)
		}
	}
	return out
}

// statusWrite checks, at each status write of a Subscription, that no
// other live replica holds its bucket.
func (f *fleet) statusWrite(r *replica, req *http.Request) {
	f.mu.Lock()
	before := f.before
	f.mu.Unlock()
	if before != nil {
		before(r, req)
	}
	p := req.URL.Path
	if req.Method != http.MethodPatch || !strings.HasSuffix(p, "/status") || !strings.Contains(p, "/subscriptions/") {
		return
	}
	parts := strings.Split(strings.TrimSuffix(p, "/status"), "/")
	name, ns := parts[len(parts)-1], parts[len(parts)-3]
	b := bucket.Of(ns+"/"+name, f.buckets)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	for _, o := range f.replicas {
		if o == r || o.cut.Load() {
			continue
		}
		for _, s := range o.h.Buckets() {
			if s.Bucket == b && s.Held {
				f.violations = append(f.violations, fmt.Sprintf("%s wrote the status of %s/%s while %s held its bucket %d", r.name, ns, name, o.name, b))
			}
		}
	}
}

func (f *fleet) checkWrites() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		f.t.Error(v)
	}
	f.t.Logf("%d status writes, %d while another live replica held the bucket", f.writes, len(f.violations))
}

// heldBy waits until the replicas hold every bucket between them, each by
// one, and want (if set) holds them all.
func (f *fleet) heldBy(want *replica, rs ...*replica) {
	f.t.Helper()
	testkit.Eventually(f.t, 60*time.Second, "every bucket held by one replica", func(context.Context) (bool, error) {
		n := map[int]int{}
		for _, r := range rs {
			for _, b := range r.held() {
				n[b]++
			}
		}
		for b := range f.buckets {
			if n[b] != 1 {
				return false, nil
			}
		}
		return want == nil || len(want.held()) == f.buckets, nil
	})
}

// delivery is one event a recorder received.
type delivery struct {
	sub, typ, name, rv string
	at                 time.Time
	replay             bool // marked cloudevent.ReplayExtension "true"
}

// recorder is one sink for every Subscription of a test: the path names
// the Subscription.
type recorder struct {
	*httptest.Server
	mu  sync.Mutex
	got []delivery
	// hold, if set (before the first delivery), is called with each
	// delivery once it is recorded: the answer waits for it to return.
	hold func(delivery)
}

func newRecorder(t *testing.T) *recorder {
	rc := &recorder{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		var obj struct {
			Metadata struct {
				Name            string `json:"name"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(ev.Data(), &obj)
		replay, _ := ev.Extensions()[cloudevent.ReplayExtension].(string)
		d := delivery{sub: strings.TrimPrefix(r.URL.Path, "/"), typ: ev.Type(), name: obj.Metadata.Name, rv: obj.Metadata.ResourceVersion, at: time.Now(), replay: replay == "true"}
		rc.mu.Lock()
		rc.got = append(rc.got, d)
		rc.mu.Unlock()
		if rc.hold != nil {
			rc.hold(d)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *recorder) all() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// has waits for a delivery to sub that match accepts.
func (rc *recorder) has(t *testing.T, what string, within time.Duration, match func(delivery) bool) delivery {
	t.Helper()
	var got delivery
	testkit.Eventually(t, within, what, func(context.Context) (bool, error) {
		for _, d := range rc.all() {
			if match(d) {
				got = d
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// duplicates counts the deliveries of a change (Subscription, type,
// object, resourceVersion) after its first.
func (rc *recorder) duplicates() int {
	n, _ := rc.duplicatesUnmarked()
	return n
}

// duplicatesUnmarked is duplicates, and those of them not marked as a
// replay: the operator would take such a copy's object for the newest
// version, and it may be older than what it already acted on.
func (rc *recorder) duplicatesUnmarked() (n int, unmarked []delivery) {
	seen := map[delivery]bool{}
	for _, d := range rc.all() {
		k := d
		k.at, k.replay = time.Time{}, false
		if seen[k] {
			n++
			if !d.replay {
				unmarked = append(unmarked, d)
			}
		}
		seen[k] = true
	}
	return n, unmarked
}

// noUnmarkedDuplicates fails t for a change delivered again without the
// replay mark.
func noUnmarkedDuplicates(t *testing.T, rc *recorder) {
	t.Helper()
	if _, unmarked := rc.duplicatesUnmarked(); len(unmarked) > 0 {
		t.Errorf("%d changes delivered again without the %s extension, e.g. %+v", len(unmarked), cloudevent.ReplayExtension, unmarked[0])
	}
}

// haSubscriptions creates n Resource-mode Subscriptions of the ConfigMaps
// in ns, sink rc/<name>, and waits for them to be Ready.
func haSubscriptions(t *testing.T, ns string, rc *recorder, n int) []string {
	env := testenv.Get(t)
	var names []string
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		names = append(names, name)
		must(t, env.Client.Create(context.Background(), subscription(ns, name, rc.URL+"/"+name,
			v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: "Resource", Namespaces: []string{ns}})))
	}
	for _, name := range names {
		condition(t, ns, name, v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	}
	return names
}

// writer changes ConfigMaps cm-0..cm-<n-1> in turn until stopped, and
// remembers each one's last resourceVersion.
type writer struct {
	mu   sync.Mutex
	last map[string]string
	at   map[string]time.Time
	stop chan struct{}
	done chan struct{}
}

func startWriter(t *testing.T, ns string, n int) *writer {
	env := testenv.Get(t)
	ctx := context.Background()
	w := &writer{last: map[string]string{}, at: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	for i := range n {
		cm := configMap(ns, fmt.Sprintf("cm-%d", i), map[string]string{"n": "0"})
		must(t, env.Client.Create(ctx, cm))
		w.last[cm.Name], w.at[cm.Name] = cm.ResourceVersion, time.Now()
	}
	go func() {
		defer close(w.done)
		for i := 1; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			cm := configMap(ns, fmt.Sprintf("cm-%d", i%n), nil)
			patch := []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, i))
			if err := env.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
				t.Errorf("writing %s: %v", cm.Name, err)
				return
			}
			w.mu.Lock()
			w.last[cm.Name], w.at[cm.Name] = cm.ResourceVersion, time.Now()
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) end() map[string]string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for k, v := range w.last {
		out[k] = v
	}
	return out
}

// lastRV is the newest resourceVersion written so far.
func (w *writer) lastRV() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var m int64
	for _, v := range w.last {
		var n int64
		fmt.Sscan(v, &n)
		m = max(m, n)
	}
	return m
}

func rvNum(s string) int64 {
	var n int64
	fmt.Sscan(s, &n)
	return n
}

// converged waits until every Subscription got, for every ConfigMap, an
// event of its last version: no change lost.
func converged(t *testing.T, rc *recorder, subs []string, last map[string]string) {
	t.Helper()
	missing := ""
	ok := testkit.Wait(60*time.Second, func() bool {
		newest := map[[2]string]int64{}
		for _, d := range rc.all() {
			k := [2]string{d.sub, d.name}
			newest[k] = max(newest[k], rvNum(d.rv))
		}
		missing = ""
		for _, s := range subs {
			for name, rv := range last {
				if newest[[2]string{s, name}] < rvNum(rv) {
					missing += fmt.Sprintf(" %s:%s@%s(got %d)", s, name, rv, newest[[2]string{s, name}])
				}
			}
		}
		return missing == ""
	})
	if !ok {
		t.Fatalf("changes lost: the last version of these ConfigMaps never reached these Subscriptions:%s", missing)
	}
}

// twoReplicas starts replicas a and b holding two of 4 buckets each, as
// assigned, with a sink for the Subscriptions of ns.
func twoReplicas(t *testing.T) (ns string, rc *recorder, f *fleet, a, b *replica) {
	t.Helper()
	_, _, ns = withReader(t)
	rc = newRecorder(t)
	f = newFleet(t, 4)
	for i, holder := range []string{"a", "a", "b", "b"} {
		f.preassign(i, holder)
	}
	a, b = f.start("a", hub.Options{}), f.start("b", hub.Options{})
	f.heldBy(nil, a, b)
	return ns, rc, f, a, b
}

// TestReplicasHandOver: Subscriptions spread over two replicas' buckets;
// a replica stopped (SIGTERM) hands its buckets over at once, one killed
// (SIGKILL: nothing more leaves it) loses them to the other once their
// Leases expire, and deliveries resume. Through both, while ConfigMaps
// change every 100 ms, no change is lost (every Subscription gets every
// ConfigMap's last version), the duplicates at the sinks are at most what
// the replicas counted as replayed and each carries the replay mark, and no
// replica writes the status of a Subscription whose bucket another live
// replica holds.
func TestReplicasHandOver(t *testing.T) {
	ns, rc, f, a, b := twoReplicas(t)
	t.Logf("buckets: a holds %v, b holds %v", a.held(), b.held())
	if len(a.held()) != 2 || len(b.held()) != 2 {
		t.Fatalf("a holds %v, b %v: want two each, as assigned", a.held(), b.held())
	}
	subs := haSubscriptions(t, ns, rc, 8)
	w := startWriter(t, ns, 10)
	time.Sleep(2 * time.Second) // both serving, each its own Subscriptions
	if n := rc.duplicates(); n != 0 {
		t.Errorf("%d duplicates while two replicas serve their own buckets", n)
	}

	// SIGTERM a: b takes its buckets.
	t0 := time.Now()
	a.stop()
	f.heldBy(b, b)
	t.Logf("graceful stop of a: b held every bucket %s after the stop began (a's stop, drain and progress write included)", time.Since(t0).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	graceful := rc.duplicates()
	t.Logf("graceful hand-off: %d duplicates at the sinks, %v counted as replayed by b", graceful, b.h.Stats().Replayed())
	if float64(graceful) > b.h.Stats().Replayed() {
		t.Errorf("%d duplicates after the graceful hand-off, more than the %v b counted as replayed", graceful, b.h.Stats().Replayed())
	}
	a2 := f.start("a2", hub.Options{})
	a2.ready(t)
	time.Sleep(2 * time.Second)

	// SIGKILL b: a2 takes every bucket once the Leases expire.
	before := w.lastRV()
	tk := time.Now()
	b.kill()
	resumed := rc.has(t, "a delivery of a change made after b's death", 60*time.Second, func(d delivery) bool { return rvNum(d.rv) > before })
	t.Logf("SIGKILL of b: deliveries resumed %s after the kill (lease duration 10 s, retry period 2 s)", resumed.at.Sub(tk).Round(time.Millisecond))
	f.heldBy(a2, a2)
	time.Sleep(time.Second)

	nothingLost(t, rc, f, subs, w.end())
}

// TestRollingRestart is a rolling update of both replicas as the hub's
// Deployment does it (maxSurge 1, maxUnavailable 0): a new replica starts
// and is ready, then an old one gets SIGTERM; then the second. While
// ConfigMaps change every 100 ms, no change is lost, the duplicates at the
// sinks are at most what the replicas counted as replayed (both reported)
// and each carries the replay mark,
// and no replica writes the status of a Subscription whose bucket another
// live replica holds.
func TestRollingRestart(t *testing.T) {
	ns, rc, f, a, b := twoReplicas(t)
	subs := haSubscriptions(t, ns, rc, 8)
	w := startWriter(t, ns, 10)
	time.Sleep(2 * time.Second)

	t0 := time.Now()
	a2 := f.start("a2", hub.Options{})
	a2.ready(t)
	a.stop()
	f.heldBy(nil, a2, b)
	t.Logf("a replaced by a2: a2 ready, a stopped, every bucket held by b and a2 %s after a2 started; a2 holds %v", time.Since(t0).Round(time.Millisecond), a2.held())
	time.Sleep(2 * time.Second)

	t0 = time.Now()
	b2 := f.start("b2", hub.Options{})
	b2.ready(t)
	b.stop()
	f.heldBy(nil, a2, b2)
	t.Logf("b replaced by b2: every bucket held by a2 and b2 %s after b2 started; a2 holds %v, b2 %v", time.Since(t0).Round(time.Millisecond), a2.held(), b2.held())
	time.Sleep(2 * time.Second)

	nothingLost(t, rc, f, subs, w.end())
	all := rc.all()
	gap := time.Duration(0)
	for i := 1; i < len(all); i++ {
		gap = max(gap, all[i].at.Sub(all[i-1].at))
	}
	t.Logf("rolling restart of both replicas: longest pause between two deliveries %s", gap.Round(time.Millisecond))
}

// nothingLost checks the end of a hand-off test, last being each
// ConfigMap's last version written: every Subscription got every
// ConfigMap's last version, the duplicates at the sinks are at most what
// the fleet's replicas counted as replayed and each carries the replay
// mark, and no replica wrote the status of a Subscription whose bucket
// another live replica held.
func nothingLost(t *testing.T, rc *recorder, f *fleet, subs []string, last map[string]string) {
	t.Helper()
	converged(t, rc, subs, last)
	dups := rc.duplicates()
	replayed, counted := 0.0, ""
	f.mu.Lock()
	for _, r := range f.replicas {
		replayed += r.h.Stats().Replayed()
		counted += fmt.Sprintf(" %s %v", r.name, r.h.Stats().Replayed())
	}
	f.mu.Unlock()
	t.Logf("%d events delivered, 0 changes lost; %d duplicates at the sinks; replayed counted by the replicas:%s", len(rc.all()), dups, counted)
	if float64(dups) > replayed {
		t.Errorf("%d duplicates delivered, more than the %v the replicas counted as replayed", dups, replayed)
	}
	noUnmarkedDuplicates(t, rc)
	f.checkWrites()
}

// holdFirst has rc hold its answer to the first delivery that match
// accepts (the sender's send stays under way) until letGo is called, at
// the latest when the test ends, before the recorder closes (cleanups run
// last first), which would wait for it. held is closed once it arrived.
func holdFirst(t *testing.T, rc *recorder, match func(delivery) bool) (held <-chan struct{}, letGo func()) {
	h, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	rc.hold = func(d delivery) {
		if match(d) {
			once.Do(func() { close(h); <-release })
		}
	}
	letGo = func() { released.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	return h, letGo
}

// TestJoinDoesNotResend: a Subscription that joins a shared watch with
// older progress (its bucket just won) has the watch go back to it; the
// changes the watch's other subscribers were already handed, sent or
// still being sent (their progress held behind a slow one), are not sent
// to them again.
func TestJoinDoesNotResend(t *testing.T) {
	env, ctx, ns := withReader(t)
	rc := newRecorder(t)
	held, letGo := holdFirst(t, rc, func(d delivery) bool {
		return d.sub == "x" && d.name == "slow" && d.typ == "dev.knative.apiserver.resource.update"
	})
	f := newFleet(t, 2)
	joiner := ""
	for i := 0; joiner == ""; i++ {
		if n := fmt.Sprintf("y%d", i); bucket.Of(ns+"/"+n, 2) != bucket.Of(ns+"/x", 2) {
			joiner = n
		}
	}
	must(t, env.Client.Create(ctx, configMap(ns, "slow", nil)))
	must(t, env.Client.Create(ctx, configMap(ns, "fast", nil)))
	cm := v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: "Resource", Namespaces: []string{ns}}
	// The joiner's bucket is held by a replica that is gone: it is won
	// once that Lease expires, after the changes below.
	f.preassign(bucket.Of(ns+"/"+joiner, 2), "gone")
	must(t, env.Client.Create(ctx, subscription(ns, joiner, rc.URL+"/"+joiner, cm)))
	must(t, env.Client.Create(ctx, subscription(ns, "x", rc.URL+"/x", cm)))
	a := f.start("a", hub.Options{})
	condition(t, ns, "x", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")

	patch := func(name string, n int) { t.Helper(); setN(t, ns, name, n) }
	patch("slow", 1)
	<-held // x's event of slow is being sent: x's progress stays before it
	patch("fast", 1)
	patch("fast", 2)
	fast := lastRV(t, ns, "fast")
	rc.has(t, "x's events of fast sent past the slow one", 30*time.Second, func(d delivery) bool { return d.sub == "x" && d.name == "fast" && d.rv == fast })
	if len(a.held()) == 2 {
		t.Fatal("the joiner's bucket was won before the changes: the test shows nothing")
	}
	f.heldBy(a, a)
	rc.has(t, "the joiner gets the changes since its progress", 30*time.Second, func(d delivery) bool { return d.sub == joiner && d.name == "fast" && d.rv == fast })
	time.Sleep(2 * time.Second) // anything sent to x again would be by now
	letGo()
	rc.has(t, "x's event of slow answered", 30*time.Second, func(d delivery) bool { return d.sub == "x" && d.name == "slow" })
	time.Sleep(time.Second)
	var xs []string
	for _, d := range rc.all() {
		if d.sub == "x" {
			xs = append(xs, fmt.Sprintf("%s %s@%s replay=%v", d.typ, d.name, d.rv, d.replay))
		}
	}
	if n := rc.duplicates(); n > 0 {
		t.Errorf("%d changes sent twice; x got:\n%s", n, strings.Join(xs, "\n"))
	}
	for _, d := range rc.all() {
		if d.sub == joiner && !d.replay {
			t.Errorf("the joiner got %s@%s, from before its bucket was won, without the replay mark", d.name, d.rv)
		}
	}
}

// TestSpecEditMarksResent: a spec edit that changes a Subscription's
// filters starts its watch again from its progress; what it was sent
// under the old spec since (one change still being sent held the
// progress back) is sent again, each copy with the replay mark and
// counted as replayed.
func TestSpecEditMarksResent(t *testing.T) {
	env, ctx, ns := withReader(t)
	rc := newRecorder(t)
	held, letGo := holdFirst(t, rc, func(d delivery) bool { return d.name == "slow" && d.typ == "dev.knative.apiserver.resource.update" })
	owned := func(name string) *corev1.ConfigMap {
		cm := configMap(ns, name, nil)
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Owner", Name: "o", UID: "u", Controller: ptr.To(true)}}
		return cm
	}
	must(t, env.Client.Create(ctx, owned("slow")))
	must(t, env.Client.Create(ctx, owned("fast")))
	f := newFleet(t, 1)
	must(t, env.Client.Create(ctx, subscription(ns, "x", rc.URL+"/x",
		v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Mode: "Resource", Namespaces: []string{ns}})))
	a := f.start("a", hub.Options{})
	condition(t, ns, "x", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")

	patch := func(name string, n int) { t.Helper(); setN(t, ns, name, n) }
	patch("fast", 0)
	first := lastRV(t, ns, "fast")
	rc.has(t, "a first change sent: x has progress", 30*time.Second, func(d delivery) bool { return d.name == "fast" && d.rv == first })
	patch("slow", 1)
	<-held
	patch("fast", 1)
	patch("fast", 2)
	fast := lastRV(t, ns, "fast")
	rc.has(t, "x's events of fast sent past the slow one", 30*time.Second, func(d delivery) bool { return d.name == "fast" && d.rv == fast })

	// The edit: only objects controlled by an Owner (both are).
	var sub v1alpha1.Subscription
	must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "x"}, &sub))
	orig := sub.DeepCopy()
	sub.Spec.Resources[0].Owner = &v1alpha1.OwnerFilter{APIVersion: "example.com/v1", Kind: "Owner"}
	must(t, env.Client.Patch(ctx, &sub, client.MergeFrom(orig))) // no resourceVersion: the hub writes the status meanwhile
	testkit.Eventually(t, 30*time.Second, "fast sent again after the edit", func(context.Context) (bool, error) {
		n := 0
		for _, d := range rc.all() {
			if d.name == "fast" && d.rv == fast {
				n++
			}
		}
		return n == 2, nil
	})
	letGo()
	rc.has(t, "slow answered", 30*time.Second, func(d delivery) bool { return d.name == "slow" })
	time.Sleep(time.Second)
	dups := rc.duplicates()
	if dups == 0 {
		t.Fatal("nothing sent again after the edit: the test shows nothing")
	}
	noUnmarkedDuplicates(t, rc)
	if replayed := a.h.Stats().Replayed(); float64(dups) > replayed {
		t.Errorf("%d duplicates, more than the %v counted as replayed", dups, replayed)
	} else {
		t.Logf("%d duplicates after the edit, %v counted as replayed", dups, replayed)
	}
}

// setN writes n as the ConfigMap's data.n (a merge patch).
func setN(t *testing.T, ns, name string, n int) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, n)))
	must(t, testenv.Get(t).Client.Patch(context.Background(), configMap(ns, name, nil), patch))
}

// lastRV is the ConfigMap's resourceVersion now.
func lastRV(t *testing.T, ns, name string) string {
	t.Helper()
	var cm corev1.ConfigMap
	must(t, testenv.Get(t).Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cm))
	return cm.ResourceVersion
}

// TestBucketLeaseEditedByHand: a bucket's Lease whose holder is set to
// garbage costs its Subscriptions their deliveries until it expires, with
// a log line saying so; every other Subscription is served meanwhile; the
// bucket is then taken back and nothing is lost. A deleted Lease is
// written again by its holder, which keeps serving.
func TestBucketLeaseEditedByHand(t *testing.T) {
	env, ctx, ns := withReader(t)
	rc := newRecorder(t)
	f := newFleet(t, 4)
	a := f.start("a", hub.Options{})
	f.heldBy(a, a)
	// Subscriptions until two fall in different buckets.
	subs := haSubscriptions(t, ns, rc, 6)
	victim, other := subs[0], ""
	vb := bucket.Of(ns+"/"+victim, 4)
	for _, s := range subs[1:] {
		if bucket.Of(ns+"/"+s, 4) != vb {
			other = s
			break
		}
	}
	if other == "" {
		t.Fatal("six Subscriptions in one bucket of four: the hash does not spread")
	}
	leases := dynamic.NewForConfigOrDie(env.Config).Resource(leasesGVR).Namespace(f.leaseNS)
	must(t, env.Client.Create(ctx, configMap(ns, "before", nil)))
	rc.has(t, "the victim served", 30*time.Second, func(d delivery) bool { return d.sub == victim && d.name == "before" })

	// The holder edited to garbage (kubectl edit): the victim's bucket is lost.
	l, err := leases.Get(ctx, bucket.LeaseName(hub.LeasePrefix, vb), metav1.GetOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(l.Object, "garbage", "spec", "holderIdentity"))
	l.SetAnnotations(nil)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	must(t, err)
	testkit.Eventually(t, 30*time.Second, "a lets the garbage-held bucket go", func(context.Context) (bool, error) {
		for _, b := range a.held() {
			if b == vb {
				return false, nil
			}
		}
		return true, nil
	})
	must(t, env.Client.Create(ctx, configMap(ns, "during", nil)))
	rc.has(t, "the other Subscription served while the victim's bucket is garbage-held", 30*time.Second, func(d delivery) bool { return d.sub == other && d.name == "during" })
	for _, want := range []string{"no hub replica wrote it", "bucket lost: its Lease names another holder"} {
		if !strings.Contains(a.logs.String(), want) {
			t.Errorf("no log line saying %q", want)
		}
	}
	// After the expiry, a takes the bucket back; the victim gets the
	// change made meanwhile, from its progress.
	f.heldBy(a, a)
	rc.has(t, "the victim's change made while its bucket was garbage-held", 30*time.Second, func(d delivery) bool { return d.sub == victim && d.name == "during" })

	// The Lease deleted: a writes it again and keeps serving.
	must(t, leases.Delete(ctx, bucket.LeaseName(hub.LeasePrefix, vb), metav1.DeleteOptions{}))
	testkit.Eventually(t, 30*time.Second, "the deleted Lease written again", func(ctx context.Context) (bool, error) {
		_, err := leases.Get(ctx, bucket.LeaseName(hub.LeasePrefix, vb), metav1.GetOptions{})
		return err == nil, nil
	})
	must(t, env.Client.Create(ctx, configMap(ns, "after", nil)))
	rc.has(t, "the victim served after its Lease was deleted", 30*time.Second, func(d delivery) bool { return d.sub == victim && d.name == "after" })
	if !strings.Contains(a.logs.String(), "was deleted (by hand?)") {
		t.Error("no log line saying the Lease was deleted")
	}
	// The bucket lost to garbage wrote no progress: what its Subscriptions
	// got since their last write is sent again, and counted.
	if n, replayed := rc.duplicates(), a.h.Stats().Replayed(); float64(n) > replayed {
		t.Errorf("%d duplicates, more than the %v counted as replayed", n, replayed)
	} else {
		t.Logf("%d duplicates, %v counted as replayed", n, replayed)
	}
	f.checkWrites()
}

// TestReplicasOfTwoVersions: a replica that finds buckets held by another
// hub version says so, once per holder, and counts them.
func TestReplicasOfTwoVersions(t *testing.T) {
	f := newFleet(t, 2)
	a := f.start("a", hub.Options{Version: "v1"})
	f.heldBy(a, a)
	b := f.start("b", hub.Options{Version: "v2"})
	testkit.Eventually(t, 30*time.Second, "b logs the other version", func(context.Context) (bool, error) {
		return strings.Count(b.logs.String(), "held by a replica of another hub version") == 2, nil
	})
	for _, s := range b.h.Buckets() {
		if s.Held || s.Holder != "a" || s.Version != "v1" {
			t.Errorf("b sees bucket %d as %+v, want held by a of v1", s.Bucket, s)
		}
	}
	time.Sleep(3 * time.Second) // more tries: still logged once per holder
	if n := strings.Count(b.logs.String(), "held by a replica of another hub version"); n != 2 {
		t.Errorf("logged %d times, want once per bucket", n)
	}
	b.ready(t) // a standby is ready: every bucket tried
}

// TestStandbyServesNothing: a replica whose buckets another holds serves
// no Subscription and keeps nothing open for them: no watch of RBAC
// objects, none of a subscribed kind, and its work counter (what the hub
// trims after) does not move. Once it takes the buckets over it watches
// both; the replica that handed them over counts the buckets it lost.
func TestStandbyServesNothing(t *testing.T) {
	_, _, ns := withReader(t)
	rc := newRecorder(t)
	f := newFleet(t, 2)
	a := f.start("a", hub.Options{})
	f.heldBy(a, a)
	haSubscriptions(t, ns, rc, 1)
	b := f.start("b", hub.Options{})
	b.ready(t)
	time.Sleep(3 * time.Second) // more tries of the Leases: still held by a
	if held := b.held(); len(held) != 0 {
		t.Fatalf("b holds %v, want none (a holds every bucket)", held)
	}
	if got := b.requested("/apis/rbac.authorization.k8s.io/"); len(got) != 0 {
		t.Errorf("the standby asked for RBAC objects: %q", got)
	}
	if got := b.requested("/namespaces/"+ns+"/configmaps", "watch=true"); len(got) != 0 {
		t.Errorf("the standby watches the subscribed ConfigMaps: %q", got)
	}
	if w := b.h.Stats().Work(); w != 0 {
		t.Errorf("the standby's work counter is %v, want 0", w)
	}
	if got := a.requested("/apis/rbac.authorization.k8s.io/v1/roles", "watch=true"); len(got) == 0 {
		t.Errorf("a serves a Subscription and watches no Roles")
	}

	before := a.h.Stats().Work()
	a.stop()
	if got := a.h.Stats().Work(); got < before+2 {
		t.Errorf("a's work counter went from %v to %v when it released its 2 buckets, want +2 at least", before, got)
	}
	f.heldBy(b, b)
	testkit.Eventually(t, 30*time.Second, "b watches RBAC objects and the ConfigMaps", func(context.Context) (bool, error) {
		return len(b.requested("/apis/rbac.authorization.k8s.io/v1/roles", "watch=true")) > 0 &&
			len(b.requested("/namespaces/"+ns+"/configmaps", "watch=true")) > 0, nil
	})
}

// TestLightStandby: a replica started with LightStandby while another
// holds every bucket is ready, reads only the bucket Leases (no watch of
// Subscriptions, of RBAC objects or of a subscribed kind) and does no
// work; when the holder is SIGKILLed it takes every bucket once their
// Leases expire, and when the next holder is stopped (SIGTERM) a second
// light standby takes them at its next read, as released (no expiry).
// Through both, while ConfigMaps change every 100 ms, no change is lost,
// and the duplicates are at most what the replicas counted as replayed,
// each marked.
func TestLightStandby(t *testing.T) {
	_, _, ns := withReader(t)
	rc := newRecorder(t)
	f := newFleet(t, 2)
	a := f.start("a", hub.Options{})
	f.heldBy(a, a)
	subs := haSubscriptions(t, ns, rc, 4)
	b := f.start("b", hub.Options{LightStandby: true})
	b.ready(t)
	w := startWriter(t, ns, 5)
	time.Sleep(5 * time.Second) // more than two reads of every Lease
	if held := b.held(); len(held) != 0 {
		t.Fatalf("the light standby holds %v, want none (a holds every bucket)", held)
	}
	for _, q := range b.requested("") {
		if !strings.Contains(q, "/leases/"+hub.LeasePrefix+"-") || !strings.HasPrefix(q, "GET ") {
			t.Errorf("the light standby asked for more than its bucket Leases: %s", q)
		}
	}
	if len(b.requested("/leases/")) < 4 {
		t.Errorf("the light standby read the Leases %d times in 5 s, want every 2 s: %q", len(b.requested("/leases/")), b.requested(""))
	}
	if got := b.h.Stats().Work(); got != 0 {
		t.Errorf("the light standby's work counter is %v, want 0", got)
	}

	// SIGKILL a: b takes every bucket once the Leases expire, and serves.
	before := w.lastRV()
	tk := time.Now()
	a.kill()
	resumed := rc.has(t, "a delivery of a change made after a's death", 60*time.Second, func(d delivery) bool { return rvNum(d.rv) > before })
	t.Logf("SIGKILL of a: deliveries resumed %s after the kill (lease duration 10 s, retry period 2 s)", resumed.at.Sub(tk).Round(time.Millisecond))
	f.heldBy(b, b)
	if !strings.Contains(b.logs.String(), "why=expired") {
		t.Errorf("b's log does not say why it started to serve:\n%s", b.logs.String())
	}

	// SIGTERM b: the next light standby takes the released buckets at once.
	c := f.start("c", hub.Options{LightStandby: true})
	c.ready(t)
	time.Sleep(3 * time.Second)
	ts := time.Now()
	b.stop()
	f.heldBy(c, c)
	t.Logf("SIGTERM of b: c held every bucket %s after the stop began", time.Since(ts).Round(time.Millisecond))
	if l := c.logs.String(); !strings.Contains(l, "why=released") {
		t.Errorf("c did not start on a released bucket (the graceful hand-off), its log:\n%s", l)
	}

	nothingLost(t, rc, f, subs, w.end())
}

// TestLightStandbysStartedTogether: two light-standby replicas started at
// once on no Leases (a new install's two pods) end as one that serves
// every bucket and one that stands by, not two that serve half each.
func TestLightStandbysStartedTogether(t *testing.T) {
	f := newFleet(t, 4)
	a, b := f.start("a", hub.Options{LightStandby: true}), f.start("b", hub.Options{LightStandby: true})
	var serving, standing *replica
	testkit.Eventually(t, 30*time.Second, "one replica holding every bucket", func(context.Context) (bool, error) {
		switch {
		case len(a.held()) == 4 && len(b.held()) == 0:
			serving, standing = a, b
		case len(b.held()) == 4 && len(a.held()) == 0:
			serving, standing = b, a
		}
		return serving != nil, nil
	})
	standing.ready(t)
	time.Sleep(3 * time.Second) // more reads: still standing by
	if held := standing.held(); len(held) != 0 {
		t.Errorf("%s holds %v, want none: %s serves every bucket", standing.name, held, serving.name)
	}
	if l := standing.logs.String(); !strings.Contains(l, "light standby: every bucket is held") {
		t.Errorf("%s does not say it stands by; its log:\n%s", standing.name, l)
	}
	if got := standing.requested("/subscriptions"); len(got) != 0 {
		t.Errorf("%s, standing by, asked for Subscriptions: %q", standing.name, got)
	}
}

// TestLightStandbyWakesForAdmission: an admission call that reaches the
// light standby (the webhooks' Service sends calls to every ready
// replica) for an unchanged operator at zero wakes its Deployment and is
// given its pod, as on any replica: the standby reads the Subscription it
// does not watch. A call for a Subscription that does not exist says so.
func TestLightStandbyWakesForAdmission(t *testing.T) {
	env, ctx, ns := withReader(t)
	f := newFleet(t, 2)
	a := f.start("a", hub.Options{})
	f.heldBy(a, a)
	must(t, env.Client.Create(ctx, operatorDeployment(ns, "op", 0)))
	sub := deploymentSub(ns, "op", "op", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}, LabelSelector: "watched=yes"})
	sub.Spec.ScaleToZero = &v1alpha1.ScaleToZero{IdleAfter: &metav1.Duration{Duration: 2 * time.Second}}
	must(t, env.Client.Create(ctx, sub))
	condition(t, ns, "op", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	waitState(t, ns, "op", v1alpha1.TargetZero)
	b := f.start("b", hub.Options{LightStandby: true})
	b.ready(t)

	type answer struct {
		pods []corev1.Pod
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		pods, done, err := b.h.ServingPods(cctx, types.NamespacedName{Namespace: ns, Name: "op"}, "Admission: CREATE v1/configmaps (test)")
		if done != nil {
			done()
		}
		got <- answer{pods, err}
	}()
	waitReplicas(t, ns, "op", 1, "an admission call at zero, on the light standby")
	pod := readyPod(t, ns, "op")
	r := <-got
	if r.err != nil || len(r.pods) != 1 || r.pods[0].Name != pod {
		t.Fatalf("the light standby's ServingPods: %v pods, %v; want pod %s", len(r.pods), r.err, pod)
	}
	if held := b.held(); len(held) != 0 {
		t.Errorf("b holds %v after answering, want none: it still stands by", held)
	}
	if _, _, err := b.h.ServingPods(ctx, types.NamespacedName{Namespace: ns, Name: "nothing-here"}, "test"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("ServingPods of a missing Subscription on the light standby: %v, want an error saying it does not exist", err)
	}
}
