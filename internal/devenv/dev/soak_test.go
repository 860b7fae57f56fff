package dev_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/devenv/pinned"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/spanlog"
)

var soakFor = flag.Duration("soak", 0, "how long TestFaultSoak injects faults (default $OPZERO_SOAK, else 2m)")

// soakDuration is -soak, else $OPZERO_SOAK, else 2 minutes, for each
// wiring: with the start and the convergence, about 3 minutes each, 6 in
// `make test`.
func soakDuration(t *testing.T) time.Duration {
	if *soakFor > 0 {
		return *soakFor
	}
	if s := os.Getenv("OPZERO_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("OPZERO_SOAK=%q: want a duration such as 10m", s)
		}
		return d
	}
	return 2 * time.Minute
}

// soakConverge bounds the convergence after the last fault: a restarted
// adapter's or the hub's backoff (up to 30 s), a missed change healed by
// the next sweep (Knative wiring: 1 min), RequeueAfters of up to 20 s, a
// cold start.
const soakConverge = 3 * time.Minute

// TestFaultSoak is the fault soak of issues 18 and 26, once per wiring
// (subtests knative and hub, one after the other: each has a control plane
// of its own, and the operator fault finds its victims in /proc). The test
// operator (internal/testop with TESTOP_SOAK: a finalizer, a child
// ConfigMap, RequeueAfter for some objects) runs through opzero dev with
// its generated manifests (durable time on, up to 3 instances):
//
//   - knative: ApiServerSources for ConfigWatchers and ConfigMaps, the
//     sweep every minute, the wakeup source;
//   - hub (--source=hub): a Subscription and the hub Deployment, its sweeps
//     scheduled months away, so that no periodic sweep runs.
//
// A steady stream of creates, updates and deletes while faults are injected
// at random (seeded, the seed is logged): kube-apiserver and etcd SIGKILLed
// and restarted, an operator instance SIGKILLed mid-reconcile, a burst of
// changes at zero instances; knative: an ApiServerSource adapter SIGKILLed,
// the wakeup source SIGKILLed with Wakeups pending; hub: the hub SIGKILLed
// with Wakeups pending (it delivers them), and hub-replica: the hub runs two
// replicas (dev's and one the test runs beside it, sharing the
// Subscriptions' buckets), and the one holding buckets goes: dev's is
// stopped (SIGTERM: it hands them over to the other at once), the test's
// SIGKILLed (dev's takes them once their Leases expire) and started again.
// Then, within soakConverge: every
// object converged (observedGeneration == generation, its child ConfigMap
// at its generation, no deletion left), no child left with a finalizer
// whose owner is gone; no two reconciles of one key overlapped; every
// RequeueAfter fired, none before its due time. Hub: 0 changes lost
// without the periodic sweep: no sweep scheduled from the start to the
// check, every object's last change followed by an event of that object,
// and the persisted progress past every object. The hub's sweep tick after
// a relist is allowed and counted; an object it reconciled is then written
// by the operator, whose write is such an event, so the event check does
// not tell a relist's update from that sweep: the summary counts the
// objects whose first event after their last change came only after a
// sweep tick.
//
// Each wiring soaks for the whole -soak duration (default 2m): halving it
// would leave one round of faults per wiring (a round of 5-6 faults takes
// about a minute), each fault once; the package's `make test` time grows
// by about 3 minutes instead. -run 'TestFaultSoak$/hub' runs one wiring.
//
// -soak=10m (or OPZERO_SOAK=10m) runs it longer; OPZERO_SOAK_SEED replays
// a seed's choices (the order of faults, the changes; not their timing).
func TestFaultSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane of its own and kills its parts")
	}
	d := soakDuration(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPZERO_SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("OPZERO_SOAK_SEED=%q: want a number", s)
		}
	}
	for _, w := range soakWirings("soak", time.Now()) {
		t.Run(w.name, func(t *testing.T) {
			t.Logf("soak: seed %d (OPZERO_SOAK_SEED=%d replays its choices), %s wiring, faults for %s, sweep %s", seed, seed, w.name, d, w.sweepText)
			s := newSoak(t, seed, w)
			s.run(d)
		})
	}
}

type soak struct {
	t     *testing.T
	w     soakWiring
	start time.Time // the soak's (sweeps are scheduled from it)
	ctx   context.Context
	plane *controlplane.Plane
	c     client.Client
	p     *dev.Platform
	buf   *syncBuffer
	ns    string
	seed  uint64
	spans string              // TESTOP_SPANS
	ops   map[string][]string // per object: the stream's writes and their results (printed on failure)
	wakes string              // TESTOP_WAKES

	mu       sync.Mutex
	live     []string             // names the stream believes exist
	wrote    map[string]time.Time // the start of each name's last create or update that succeeded
	deaths   map[int]time.Time    // operator pids the test killed
	srcKills []time.Time          // when the test killed what delivers Wakeups
	faults   map[string]int       // by kind
	notes    []string             // one per fault
	paused   atomic.Bool          // the stream holds off (a burst at zero is coming)
	sent     map[string]int       // create, update, delete
	failed   atomic.Int64         // calls that failed (the API server away)
	lastDone time.Time            // the end of the last fault
	seq      atomic.Int64         // object names

	// hub: the second replica the test runs, and when the fault
	// hub-replica left no replica serving (until every bucket was held)
	hub2        *hubReplica
	replicaDown [][2]time.Time
	// planeDown: each kube-apiserver or etcd outage, until planeRecovery
	// after the restart
	planeDown [][2]time.Time
}

// planeRecovery is how long after the control plane is back the Wakeups
// that fell due while it was down may still wait: the wakeup source reads
// its records again once its watch failed, and the hub's replicas that
// could not renew their bucket Leases for the renew deadline (7 s) gave
// them up and win them back (at once, or once unrenewed for the lease
// duration, 10 s, tried every 2 s). A success meanwhile cancels them.
const planeRecovery = 20 * time.Second

func newSoak(t *testing.T, seed uint64, w soakWiring) *soak {
	ctx := context.Background()
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(t.TempDir(), "plane"), DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plane.Stop(false) })
	crds, err := (pinned.Resolver{}).CRDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, crds...); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	cfg := *plane.Config
	cfg.Timeout = 10 * time.Second // no call hangs through an outage
	c, err := client.New(&cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, w: w, start: time.Now(), ctx: ctx, plane: plane, c: c, ns: "soak", seed: seed, buf: &syncBuffer{},
		spans: filepath.Join(t.TempDir(), "spans"), wakes: filepath.Join(t.TempDir(), "wakes"),
		deaths: map[int]time.Time{}, faults: map[string]int{}, sent: map[string]int{}, wrote: map[string]time.Time{}}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}); err != nil {
		t.Fatal(err)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TESTOP_SOAK", "1") // for the description `opzero manifests` reads: it owns ConfigMaps
	objs, err := manifests.Build(ctx, root, "./internal/testop", manifests.Options{Namespace: s.ns, Source: w.source})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	us, err := dev.ReadManifests("-", strings.NewReader(string(stream)))
	if err != nil {
		t.Fatal(err)
	}
	s.prepare(us)
	p := devtest.Start(t, ctx, dev.Options{Kubeconfig: plane.Kubeconfig, Objects: us, Dir: t.TempDir(),
		CacheDir: cacheDir, BuildDir: root, Idle: 2 * time.Second, Events: dev.NewEventWriter(s.buf)})
	s.p = p
	if w.source == manifests.SourceHub {
		s.hub2 = s.startHubReplica()
	}
	return s
}

// prepare sets the sweeps (the PingSources' or the Subscription's) and the
// operator's soak environment, and lets it
// write its child ConfigMaps (a +kubebuilder:rbac marker would, but `opzero
// manifests` reads none from a main package).
func (s *soak) prepare(objs []*unstructured.Unstructured) {
	for _, o := range objs {
		switch {
		case o.GetKind() == "ClusterRole" && o.GetName() == "opzero:"+s.ns+":testop":
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			rules = append(rules, map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"},
				"verbs": []any{"create", "update", "patch", "delete"}})
			_ = unstructured.SetNestedSlice(o.Object, rules, "rules")
		case o.GetKind() == "PingSource" && strings.HasSuffix(o.GetName(), "full-sweep"):
			_ = unstructured.SetNestedField(o.Object, outOfReach(s.start), "spec", "schedule")
		case o.GetKind() == "PingSource":
			_ = unstructured.SetNestedField(o.Object, s.w.sweep, "spec", "schedule")
		case o.GetKind() == "Subscription":
			sweeps, _, _ := unstructured.NestedSlice(o.Object, "spec", "sweeps")
			for _, sw := range sweeps {
				sw := sw.(map[string]any)
				if sw["data"] != nil {
					sw["schedule"] = outOfReach(s.start)
				} else {
					sw["schedule"] = s.w.sweep
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, sweeps, "spec", "sweeps")
		case o.GetKind() == "Service" && o.GetAPIVersion() == "serving.knative.dev/v1":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			env, _ := c["env"].([]any)
			for k, v := range map[string]string{"TESTOP_SOAK": "1", "TESTOP_SPANS": s.spans, "TESTOP_WAKES": s.wakes} {
				env = append(env, map[string]any{"name": k, "value": v})
			}
			c["env"] = env
			_ = unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
		}
	}
}

func (s *soak) run(d time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); s.stream(rand.New(rand.NewPCG(s.seed, 1)), stop) }()
	frng := rand.New(rand.NewPCG(s.seed, 2))
	end := time.Now().Add(d)
	// Rounds of every kind in a random order; the first round always ends,
	// so each kind is injected at least once.
	for round := 0; round == 0 || time.Now().Before(end); round++ {
		kinds := slices.Clone(s.w.faults)
		frng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			if round > 0 && !time.Now().Before(end) {
				break
			}
			time.Sleep(time.Duration(3000+frng.IntN(5000)) * time.Millisecond) // the pace of faults, not a wait for an event
			s.inject(k, frng)
		}
	}
	close(stop)
	<-done
	s.check()
}

// stream creates, updates and deletes soak objects every 150-350 ms.
func (s *soak) stream(rng *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(150+rng.IntN(200)) * time.Millisecond): // pacing
		}
		if s.paused.Load() {
			continue
		}
		s.mu.Lock()
		n := len(s.live)
		s.mu.Unlock()
		switch r := rng.IntN(10); {
		case n < 15 || n < 60 && r < 4:
			s.create(rng)
		case r < 8:
			s.update(rng)
		default:
			s.delete(rng)
		}
	}
}

// note records the stream's write of name, printed if name ends badly.
func (s *soak) note(name, op string, at time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops == nil {
		s.ops = map[string][]string{}
	}
	s.ops[name] = append(s.ops[name], fmt.Sprintf("%s-%s %s: %v", at.Format(time.StampMilli), time.Now().Format("15:04:05.000"), op, err))
}

func (s *soak) count(op string, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed.Add(1)
		return false
	}
	s.sent[op]++
	return true
}

// create makes a soak object; a third of them ask to be woken 8-20 s
// after each new generation.
func (s *soak) create(rng *rand.Rand) {
	name := fmt.Sprintf("s-%04d", s.seq.Add(1))
	sel := map[string]string{"app": name, "v": "0"}
	if rng.IntN(3) == 0 {
		sel["wake"] = fmt.Sprintf("%ds", 8+rng.IntN(13))
	}
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}, Spec: v1.ConfigWatcherSpec{ConfigMap: "soak", PodSelector: sel}}
	at := time.Now()
	err := s.c.Create(s.ctx, cw)
	s.note(name, "create", at, err)
	if s.count("create", err) {
		s.mu.Lock()
		s.live = append(s.live, name)
		s.wrote[name] = at
		s.mu.Unlock()
	}
}

func (s *soak) pick(rng *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) == 0 {
		return ""
	}
	return s.live[rng.IntN(len(s.live))]
}

func (s *soak) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = slices.DeleteFunc(s.live, func(n string) bool { return n == name })
}

// update changes a live object's spec: a new generation.
func (s *soak) update(rng *rand.Rand) {
	name := s.pick(rng)
	if name == "" {
		return
	}
	patch := fmt.Sprintf(`{"spec":{"podSelector":{"v":"%d"}}}`, rng.IntN(1_000_000))
	at := time.Now()
	err := s.c.Patch(s.ctx, &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}, client.RawPatch(types.MergePatchType, []byte(patch)))
	s.note(name, "update", at, err)
	if apierrors.IsNotFound(err) {
		s.forget(name)
		return
	}
	if s.count("update", err) {
		s.mu.Lock()
		if at.After(s.wrote[name]) { // the burst's concurrent updates: the last write followed the latest start
			s.wrote[name] = at
		}
		s.mu.Unlock()
	}
}

func (s *soak) delete(rng *rand.Rand) {
	name := s.pick(rng)
	if name == "" {
		return
	}
	at := time.Now()
	err := s.c.Delete(s.ctx, &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}})
	s.note(name, "delete", at, err)
	if err == nil || apierrors.IsNotFound(err) {
		s.forget(name)
	}
	if !apierrors.IsNotFound(err) {
		s.count("delete", err)
	}
}

// inject plays one fault and records it.
func (s *soak) inject(kind string, rng *rand.Rand) {
	t := s.t
	note := ""
	switch kind {
	case "kube-apiserver", "etcd":
		outage := time.Duration(2000+rng.IntN(6000)) * time.Millisecond
		if err := s.plane.Kill(kind); err != nil {
			t.Fatal(err)
		}
		time.Sleep(outage) // the fault's length
		if err := s.plane.Restart(s.ctx, kind, true); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.planeDown = append(s.planeDown, [2]time.Time{time.Now().Add(-outage), time.Now().Add(planeRecovery)})
		s.mu.Unlock()
		note = fmt.Sprintf("SIGKILL, restarted %s later", outage.Round(time.Millisecond))
	case "adapter":
		var adapters []string
		pids := s.p.SourcePIDs()
		for what := range pids {
			if strings.HasPrefix(what, "ApiServerSource ") {
				adapters = append(adapters, what)
			}
		}
		slices.Sort(adapters)
		what := adapters[rng.IntN(len(adapters))]
		note = fmt.Sprintf("SIGKILL of %s pid %d", what, s.killSupervised(what))
	case "operator":
		pid, mid := s.operatorMidReconcile(10 * time.Second)
		if pid == 0 {
			s.logFault(kind, "not injected: no operator instance ran for 10 s")
			return
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		s.mu.Lock()
		s.deaths[pid] = time.Now()
		s.mu.Unlock()
		note = fmt.Sprintf("SIGKILL of pid %d (mid-reconcile: %v)", pid, mid)
	case "wakeup-source", "hub":
		n := s.pendingWakeups(20 * time.Second)
		pid := s.killSupervised(s.w.wakeups)
		s.mu.Lock()
		s.srcKills = append(s.srcKills, time.Now())
		s.mu.Unlock()
		note = fmt.Sprintf("SIGKILL of pid %d with %d Wakeups pending", pid, n)
	case "hub-replica":
		note = s.replicaFault()
	case "burst-at-zero":
		s.paused.Store(true)
		zero := pollUntil(time.Minute, func() bool { return s.p.Services[0].Activator.Instances() == 0 }) == nil
		if !zero {
			s.paused.Store(false)
			s.logFault(kind, "not injected: instances did not reach zero within a minute")
			return
		}
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			r := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					s.create(r)
				} else {
					s.update(r)
				}
			}()
		}
		wg.Wait()
		s.paused.Store(false)
		note = "20 creates and updates at once at zero instances"
	}
	s.mu.Lock()
	s.faults[kind]++
	s.lastDone = time.Now()
	s.mu.Unlock()
	s.logFault(kind, note)
}

// killSupervised sends SIGKILL to the process dev supervises as what; one
// that dev is restarting (gone, its successor not started yet) is waited
// for, up to a minute.
func (s *soak) killSupervised(what string) int {
	var pid int
	var err error
	if pollUntil(time.Minute, func() bool {
		pid = s.p.SourcePIDs()[what]
		err = syscall.Kill(pid, syscall.SIGKILL)
		return err == nil
	}) != nil {
		s.t.Fatalf("no live process of %s to kill for a minute: pid %d: %v", what, pid, err)
	}
	return pid
}

func (s *soak) logFault(kind, note string) {
	s.t.Logf("fault %s: %s", kind, note)
	s.mu.Lock()
	s.notes = append(s.notes, kind+": "+note)
	s.mu.Unlock()
}

// operatorPIDs lists the live processes of the testop binary built for
// the ko:// image (from /proc, not the activator's books).
func operatorPIDs() []int {
	exes, _ := filepath.Glob(filepath.Join(cacheDir, "*testop*"))
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		target, err := os.Readlink(p)
		if err != nil || !slices.Contains(exes, target) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if i := strings.LastIndexByte(string(st), ')'); err != nil || i < 0 || len(st) < i+3 || st[i+2] == 'Z' {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// operatorMidReconcile finds an operator process with a reconcile under
// way (a span started and not ended), for up to timeout; failing that, any
// operator process.
func (s *soak) operatorMidReconcile(timeout time.Duration) (int, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		open := openSpans(s.spans)
		for _, pid := range operatorPIDs() {
			if open[pid] {
				return pid, true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pids := operatorPIDs(); len(pids) > 0 {
		return pids[0], false
	}
	return 0, false
}

// openSpans: the pids with a reconcile started and not ended.
func openSpans(file string) map[int]bool {
	b, _ := os.ReadFile(file)
	open := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		open[f[1]+" "+f[2]] = f[0] == "start"
	}
	out := map[int]bool{}
	for k, o := range open {
		if o {
			pid, _ := strconv.Atoi(strings.Fields(k)[1])
			out[pid] = true
		}
	}
	return out
}

// pendingWakeups waits up to timeout for a Wakeup not yet due and returns
// how many are pending.
func (s *soak) pendingWakeups(timeout time.Duration) int {
	n := 0
	_ = pollUntil(timeout, func() bool {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("opzero.dev/v1alpha1")
		list.SetKind("WakeupList")
		if s.c.List(s.ctx, list, client.InNamespace(s.ns)) != nil {
			return false
		}
		n = 0
		for _, w := range list.Items {
			due, _, _ := unstructured.NestedString(w.Object, "spec", "due")
			if at, err := time.Parse(time.RFC3339Nano, due); err == nil && at.After(time.Now()) {
				n++
			}
		}
		return n > 0
	})
	return n
}

// soakWake is testop's record of an object's RequeueAfter (soak.go there).
type soakWake struct {
	gen       int64
	due, woke time.Time
}

func parseSoakWake(s string) soakWake {
	var w soakWake
	var due, woke int64
	if _, err := fmt.Sscanf(s, "gen=%d due=%d woke=%d", &w.gen, &due, &woke); err != nil {
		return soakWake{}
	}
	w.due = time.UnixMilli(due)
	if woke != 0 {
		w.woke = time.UnixMilli(woke)
	}
	return w
}

// wakeup is one delivery of a Wakeup to the operator.
type wakeup struct {
	at, end time.Time // the request's arrival and answer
	code    int
	result  string
}

// wakeupDeliveries returns every Wakeup delivery, per key (namespace/name).
func (s *soak) wakeupDeliveries() map[string][]wakeup {
	out := map[string][]wakeup{}
	for _, d := range s.p.Services[0].Deliveries() {
		if d.Type != "dev.opzero.wakeup" {
			continue
		}
		// /apis/<group>/<version>/namespaces/<ns>/<Kind>/<name>
		parts := strings.Split(d.Subject, "/")
		if len(parts) < 4 {
			continue
		}
		k := parts[len(parts)-3] + "/" + parts[len(parts)-1]
		out[k] = append(out[k], wakeup{at: d.At, end: d.At.Add(d.Took), code: d.Code, result: d.Result})
	}
	return out
}

// fired tells whether a Wakeup fired the RequeueAfter w asked for: the
// reconcile that saw it due ran while a Wakeup of the key was delivered
// (a retry's Wakeup counts: an earlier retry takes the record's place, as
// controller-runtime's queue keeps one entry per key), or a Wakeup was
// delivered and answered 2xx at or after the due time. A reconcile after
// the due time for another reason (a sweep, an event) is not a firing.
func (w soakWake) fired(ds []wakeup) bool {
	return slices.ContainsFunc(ds, func(d wakeup) bool {
		return !w.woke.Before(d.at.Truncate(time.Millisecond)) && !w.woke.After(d.end) || d.code/100 == 2 && !d.at.Before(w.due)
	})
}

// superseded reports whether the wakeup was due while no wakeup source
// ran (one of down's intervals) and another event's reconcile at or after
// due, still in that interval, recorded woke: that success cancelled the
// Wakeup (the engine's contract: a later success cancels what is pending),
// so the source, back, had nothing left to deliver. Not a lost wakeup.
func (w soakWake) superseded(down [][2]time.Time) bool {
	return slices.ContainsFunc(down, func(d [2]time.Time) bool {
		return !w.due.Before(d[0]) && w.due.Before(d[1]) && !w.woke.Before(w.due) && w.woke.Before(d[1])
	})
}

// sourceDown is when nothing delivered Wakeups (the wakeup source, the
// hub): from each kill by the test to dev's restart of it (still down:
// until now); the hub-replica faults until every bucket was held again;
// the control plane's outages until planeRecovery after its restart (no
// Wakeup can be read, routed or reconciled while it is down).
func (s *soak) sourceDown() [][2]time.Time {
	s.mu.Lock()
	kills := slices.Clone(s.srcKills)
	s.mu.Unlock()
	var restarts []time.Time
	for _, e := range s.buf.events(s.t) {
		if e.Event == dev.EventProcessRestarted && e.Process == s.w.wakeups {
			restarts = append(restarts, e.Time)
		}
	}
	var down [][2]time.Time
	for _, k := range kills {
		end := time.Now()
		for _, r := range restarts {
			if r.After(k) {
				end = r
				break
			}
		}
		down = append(down, [2]time.Time{k, end})
	}
	s.mu.Lock()
	down = append(down, s.replicaDown...)
	down = append(down, s.planeDown...)
	s.mu.Unlock()
	return down
}

// state lists what is not converged yet, and how many objects there are
// and how many converged.
func (s *soak) state() (problems []string, objects, converged int) {
	cws := &v1.ConfigWatcherList{}
	cms := &corev1.ConfigMapList{}
	if err := s.c.List(s.ctx, cws, client.InNamespace(s.ns)); err != nil {
		return []string{err.Error()}, 0, 0
	}
	if err := s.c.List(s.ctx, cms, client.InNamespace(s.ns)); err != nil {
		return []string{err.Error()}, 0, 0
	}
	delivered := s.wakeupDeliveries()
	down := s.sourceDown()
	children := map[string]*corev1.ConfigMap{}
	for i, cm := range cms.Items {
		if strings.HasSuffix(cm.Name, "-child") {
			children[cm.Name] = &cms.Items[i]
		}
	}
	owners := map[string]types.UID{}
	for _, cw := range cws.Items {
		owners[cw.Name] = cw.UID
		objects++
		var bad []string
		gen := cw.Generation
		if cw.DeletionTimestamp != nil {
			bad = append(bad, fmt.Sprintf("being deleted, finalizers %v", cw.Finalizers))
		}
		if cw.Status.ObservedGeneration != gen {
			bad = append(bad, fmt.Sprintf("observedGeneration %d, generation %d", cw.Status.ObservedGeneration, gen))
		}
		if !slices.Contains(cw.Finalizers, "soak.opzero.dev/children") {
			bad = append(bad, "no finalizer")
		}
		child := children[cw.Name+"-child"]
		switch {
		case child == nil:
			bad = append(bad, "no child ConfigMap")
		case metav1.GetControllerOf(child) == nil || metav1.GetControllerOf(child).UID != cw.UID:
			bad = append(bad, "child not controlled by it")
		case child.Data["generation"] != strconv.FormatInt(gen, 10):
			bad = append(bad, fmt.Sprintf("child at generation %s", child.Data["generation"]))
		case !slices.Contains(child.Finalizers, "soak.opzero.dev/owner"):
			bad = append(bad, "child without its finalizer")
		}
		if cw.Spec.PodSelector["wake"] != "" {
			w := parseSoakWake(cw.Status.ConfigMapVersion)
			ds := delivered[s.ns+"/"+cw.Name]
			fired := w.fired(ds) || w.superseded(down)
			switch {
			case w.gen != gen:
				bad = append(bad, fmt.Sprintf("RequeueAfter not asked for generation %d (status %q)", gen, cw.Status.ConfigMapVersion))
			case w.woke.IsZero() || !fired:
				var seen []string
				for _, d := range ds {
					seen = append(seen, fmt.Sprintf("%s-%s %d %q", d.at.Format(time.StampMilli), d.end.Format(time.StampMilli), d.code, d.result))
				}
				bad = append(bad, fmt.Sprintf("lost wakeup: due %s (%s ago), reconciled after it at %s; Wakeups delivered: %v",
					w.due.Format(time.StampMilli), time.Since(w.due).Round(time.Millisecond), w.woke.Format(time.StampMilli), seen))
			}
		}
		if len(bad) == 0 {
			converged++
		} else {
			problems = append(problems, cw.Name+": "+strings.Join(bad, "; "))
		}
	}
	for _, cm := range children {
		owner := strings.TrimSuffix(cm.Name, "-child")
		if ref := metav1.GetControllerOf(cm); ref == nil || owners[owner] != ref.UID {
			problems = append(problems, fmt.Sprintf("ConfigMap %s: its owner is gone; finalizers %v, being deleted %v", cm.Name, cm.Finalizers, cm.DeletionTimestamp != nil))
		}
	}
	slices.Sort(problems)
	return problems, objects, converged
}

// check waits for convergence after the last fault, then checks the
// invariants and logs the summary line.
func (s *soak) check() {
	t := s.t
	s.mu.Lock()
	last := s.lastDone
	s.mu.Unlock()
	var problems []string
	var objects, converged int
	err := pollUntil(time.Until(last.Add(soakConverge)), func() bool {
		problems, objects, converged = s.state()
		return len(problems) == 0
	})
	took := time.Since(last)
	tookText := took.Round(100 * time.Millisecond).String()
	if err != nil {
		tookText = "not within " + soakConverge.String()
	}

	// Overlaps: the span log of every operator process, a reconcile cut by
	// a death ending at it (the test's kills; other exits when dev saw them).
	deaths := map[int]time.Time{}
	for _, e := range s.buf.events(t) {
		if e.Event == dev.EventProcessStopped && e.PID != 0 {
			deaths[e.PID] = e.Time
		}
	}
	s.mu.Lock()
	for pid, at := range s.deaths {
		deaths[pid] = at
	}
	s.mu.Unlock()
	runs, rerr := spanlog.Read(s.spans, deaths)
	if rerr != nil {
		t.Fatal(rerr)
	}
	overlaps := spanlog.Overlaps(runs, t.Logf)

	// Wakeups: none delivered before the due time of every RequeueAfter
	// asked for its key; lost ones are those state() still reports.
	wants := readWants(t, s.wakes)
	early, fired := 0, 0
	for k, ds := range s.wakeupDeliveries() {
		for _, d := range ds {
			if d.code/100 != 2 || !strings.Contains(d.result, "wakeup (RequeueAfter)") {
				continue
			}
			fired++
			if !slices.ContainsFunc(wants[k], func(due time.Time) bool { return !due.After(d.at) }) {
				early++
				t.Logf("early wakeup: %s delivered at %s, before every due time asked (%v)", k, d.at.Format(time.StampMilli), wants[k])
			}
		}
	}
	lost := 0
	for _, p := range problems {
		if strings.Contains(p, "lost wakeup") {
			lost++
		}
	}

	wiring, wproblems := s.wiringChecks()
	s.mu.Lock()
	var byKind []string
	total := 0
	for _, k := range s.w.faults {
		byKind = append(byKind, fmt.Sprintf("%s=%d", k, s.faults[k]))
		total += s.faults[k]
	}
	sent := s.sent["create"] + s.sent["update"] + s.sent["delete"]
	summary := fmt.Sprintf("soak summary: seed %d, %s wiring, sweep %s; faults %d (%s); events sent %d (%d creates, %d updates, %d deletes; %d calls failed while the plane was down); "+
		"objects converged %d of %d; overlaps %d; lost wakeups %d; early wakeups %d (of %d RequeueAfter wakeups delivered); %s; converged %s after the last fault",
		s.seed, s.w.name, s.w.sweepText, total, strings.Join(byKind, " "), sent, s.sent["create"], s.sent["update"], s.sent["delete"], s.failed.Load(),
		converged, objects, overlaps, lost, early, fired, wiring, tookText)
	missing := []string{}
	for _, k := range s.w.faults {
		if s.faults[k] == 0 {
			missing = append(missing, k)
		}
	}
	s.mu.Unlock()
	var notes []string
	for _, e := range s.buf.events(t) {
		if e.Event == dev.EventProcessRestarted || e.Event == dev.EventSweep {
			notes = append(notes, fmt.Sprintf("%s %s %s", e.Time.Format(time.StampMilli), e.Event, e.Process))
		}
	}
	t.Logf("dev's restarts and sweeps:\n  %s", strings.Join(notes, "\n  "))
	t.Log(summary)
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
		}
		t.Errorf("not converged within %s of the last fault:\n  %s", soakConverge, strings.Join(problems, "\n  "))
		for _, p := range problems {
			if child, ok := strings.CutSuffix(strings.SplitN(p, ":", 2)[0], "-child"); ok && strings.Contains(p, "owner is gone") {
				child = strings.TrimPrefix(child, "ConfigMap ")
				s.mu.Lock()
				ops := s.ops[child]
				s.mu.Unlock()
				var spans []string
				for _, r := range runs[s.ns+"/"+child] {
					spans = append(spans, fmt.Sprintf("pid %d %s-%s", r.PID, r.Start.Format(time.StampMilli), r.End.Format("15:04:05.000")))
				}
				t.Logf("%s/%s: the stream's writes (sent-answered):\n  %s\nits reconciles:\n  %s\nthe operator's log lines naming it:\n  %s",
					s.ns, child, strings.Join(ops, "\n  "), strings.Join(spans, "\n  "),
					strings.Join(linesNaming(s.p.LogPath("service-"+s.ns+"-testop"), s.ns, child, 30), "\n  "))
			}
		}
	}
	if overlaps != 0 || early != 0 {
		t.Errorf("%d overlapping reconciles of one key, %d wakeups before their due time", overlaps, early)
	}
	if len(missing) > 0 {
		t.Errorf("faults never injected: %v", missing)
	}
	if len(wproblems) > 0 {
		if len(wproblems) > 20 {
			wproblems = append(wproblems[:20], fmt.Sprintf("... and %d more", len(wproblems)-20))
		}
		t.Errorf("%s wiring: changes not delivered as events without a periodic sweep:\n  %s", s.w.name, strings.Join(wproblems, "\n  "))
	}
}

// wiringChecks returns what the wiring adds to the summary (the sweep
// ticks delivered; the hub's relists and drops) and, for a wiring that
// must deliver every change, its failures: a sweep scheduled between the
// start and now, the persisted progress not past the newest object 15 s
// after convergence, an object whose last change reached the operator as
// no event of it.
func (s *soak) wiringChecks() (summary string, problems []string) {
	events := s.buf.events(s.t)
	ticks, devSweeps := sweepTicks(events)
	summary = fmt.Sprintf("sweep ticks delivered %d (dev's after an adapter's gap %d)", ticks, devSweeps)
	if s.w.source == manifests.SourceHub {
		relists, dropped := s.hubLogs()
		summary = fmt.Sprintf("sweep ticks delivered %d (none scheduled; the hub relisted after 410 Gone %d times, a tick at once after each); hub events dropped after retries %d; "+
			"the hub replicas' hand-offs:\n  %s", ticks, relists, dropped, strings.Join(s.handoffLines(), "\n  "))
	}
	if !s.w.everyChange {
		return summary, nil
	}
	next, err := sweepScheduledBy(s.start, s.w.sweep, outOfReach(s.start))
	if err != nil || !next.After(time.Now()) {
		problems = append(problems, fmt.Sprintf("a periodic sweep was scheduled within the run: the first after the start at %s (%v)", next, err))
	}
	var behind []string
	if s.w.source == manifests.SourceHub && pollUntil(15*time.Second, func() bool { behind = s.progressBehind(); return len(behind) == 0 }) != nil {
		problems = append(problems, behind...) // resuming from it after a restart would send again what was sent
	}
	cws := &v1.ConfigWatcherList{}
	if err := s.c.List(s.ctx, cws, client.InNamespace(s.ns)); err != nil {
		return summary, append(problems, err.Error())
	}
	var names []string
	for _, cw := range cws.Items {
		names = append(names, cw.Name)
	}
	s.mu.Lock()
	wrote := maps.Clone(s.wrote)
	s.mu.Unlock()
	missed, afterSweep := undelivered(s.ns, names, wrote, events)
	summary += fmt.Sprintf("; objects whose last change was followed by an event of it %d of %d (%d only after a sweep tick)", len(names)-len(missed), len(names), len(afterSweep))
	if len(afterSweep) > 0 {
		s.t.Logf("objects whose first event after their last change came after a sweep tick:\n  %s\nthe hub's relists and watch failures:\n  %s",
			strings.Join(afterSweep, "\n  "), strings.Join(hubWatchLines(s.p.LogPath("deployment-"+manifests.HubNamespace+"-"+manifests.HubName)), "\n  "))
	}
	return summary, append(problems, missed...)
}

// readWants reads $TESTOP_WAKES: per key, every due time asked.
func readWants(t *testing.T, file string) map[string][]time.Time {
	out := map[string][]time.Time{}
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var key string
		var pid int
		var nanos int64
		if _, err := fmt.Sscanf(sc.Text(), "want %s %d %d", &key, &pid, &nanos); err == nil {
			out[key] = append(out[key], time.Unix(0, nanos))
		}
	}
	return out
}
