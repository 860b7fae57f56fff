package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/proc"
)

// The hubscale part (issue 37, part 5): one hub for many operators. On a
// control plane of its own, hubscaleOps Subscriptions (hsPlan: a mix of
// kinds, modes, selectors and referencedBy) over hubscaleObjects
// ConfigMaps, each sink an authenticating receiver in this process; the
// hub's memory after the initial sync and after a stream of changes, its
// change -> delivered latency beside a plain watch's in the same run, and
// its CPU per 1000 changes.

// Flags of the part (main binds them).
var (
	hubscaleOps      = 100
	hubscaleObjects  = 100_000
	hubscaleChanges  = 5000
	hubscaleRate     = 100.0 // changes per second
	hubscaleReplicas = 1
	hubscaleHubArgs  = ""
	hubscaleSettle   = 30 * time.Second
	hubscaleCSV      = ""
)

const (
	hubscaleTitle = "One hub for many operators"
	hsHubSA       = "opzero-system/opzero-hub"
	hsTrimWait    = 65 * time.Second // the hub trims again each minute in which it worked
)

// hsPoint is the hub's memory (every replica summed) at one moment.
type hsPoint struct {
	what string
	mem  hsMem
}

type hsResult struct {
	p                        hsPlan
	created, ready           time.Duration // ConfigMaps created in; hub start -> every Subscription Ready
	load                     [3]string     // 1-minute load: part start, stream start, stream end
	points                   []hsPoint
	watches                  float64
	changes                  []hsChange
	subs                     []map[int]bool // per change, the operators it goes to
	warm                     int            // update events the sinks had before the stream (its warm-up)
	warmWatch                [2]int64       // the watches' update events before the stream
	wAll, wNS                *hsWatch       // every ConfigMap in one stream; one stream per namespace
	nsLat, nsBehind          []time.Duration
	nsMissing                int
	streamTook, drainTook    time.Duration
	watchLat, hubLat         []time.Duration
	resLat, refLat           []time.Duration
	behind                   []time.Duration   // per delivery: its arrival - the watch's event of the same change
	watchSeen, nsSeen        []time.Duration   // per change (seenAfter), for -hubscale-csv
	hubSeen                  [][]time.Duration // per sink, per change
	watchMissing, hubMissing int
	expected                 int
	cpu                      map[string]time.Duration // hub, kube-apiserver, etcd, suite over the stream
	idleCPU, idleAfter       time.Duration            // the hub's over the settle time and the wait after the stream
	apiserverRSS             float64
	metrics                  map[string]float64
	refused                  int64
	other                    map[string]int
}

func hubScale(ctx context.Context, r *report, dir string) error {
	p := hsPlan{ops: hubscaleOps, objects: hubscaleObjects}
	switch {
	case p.ops < 10:
		return fmt.Errorf("-hubscale-ops %d: want at least 10 (the mix has 4 kinds of operator)", p.ops)
	case p.objects/p.ops < 20:
		return fmt.Errorf("-hubscale-objects %d: want at least 20 per operator", p.objects)
	case hubscaleReplicas < 1 || (hubscaleReplicas > 1 && hubscaleHubArgs == ""):
		return fmt.Errorf("-hubscale-replicas %d: the hub on this tree runs as one replica; more need their sharding flags in -hubscale-hub-args ({i} and {n} are replaced by each replica's index and count)", hubscaleReplicas)
	}
	res := &hsResult{p: p, load: [3]string{loadavg()}, cpu: map[string]time.Duration{}, other: map[string]int{}}
	d := filepath.Join(dir, "hubscale")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	fmt.Println("  hubscale: building opzero-hub ...")
	tags := ""
	if pprofDir != "" { // the folder: -only hubscale does not pass run's set-up
		tags = "opzero_pprof"
		if err := os.MkdirAll(pprofDir, 0o755); err != nil {
			return err
		}
	}
	bin := filepath.Join(d, "opzero-hub")
	if out, err := buildCmd(tags, bin, "./cmd/opzero-hub").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/opzero-hub: %v\n%s", err, out)
	}
	fmt.Println("  hubscale: starting a control plane of its own ...")
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(d, "plane"), DieWithParent: true, NoControllerManager: true})
	if err != nil {
		return err
	}
	defer plane.Stop(false)
	for _, crds := range []string{"examples/configwatcher/config/crd", "config/crd"} {
		if _, err := controlplane.InstallCRDs(ctx, plane.Config, crds); err != nil {
			return err
		}
	}
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	cfg := *plane.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	cfg.ContentType = "application/json" // as the hub's watches
	c, err := client.New(&cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		return err
	}
	if err := hsSetup(ctx, c, p, res); err != nil {
		return err
	}
	sinks := make([]*hsSink, p.ops)
	hubUser := "system:serviceaccount:" + strings.Replace(hsHubSA, "/", ":", 1)
	for i := range sinks {
		if sinks[i], err = startSink(c, hsAudience(i), hubUser); err != nil {
			return err
		}
		defer sinks[i].srv.Close()
		if err := c.Create(ctx, p.subscription(i, sinks[i].url)); err != nil {
			return err
		}
	}
	// The reference watches on connections of their own, as separate
	// clients': not behind the PATCHes and TokenReviews on the suite's
	// shared one. One watch of every ConfigMap (one stream carries every
	// change), and one watch per namespace over one connection (100
	// streams, as the hub's 140 share its connection).
	var nss []string
	for i := range p.ops {
		nss = append(nss, hsNamespace(i))
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watches := map[string]*hsWatch{}
	for name, in := range map[string][]string{"all": {""}, "ns": nss} {
		wcfg := cfg
		wcfg.Dial = (&net.Dialer{}).DialContext // a custom dialer: client-go does not share the transport
		wcs, err := kubernetes.NewForConfig(&wcfg)
		if err != nil {
			return err
		}
		if watches[name], err = startWatch(wctx, wcs, in); err != nil {
			return err
		}
	}
	res.wAll, res.wNS = watches["all"], watches["ns"]
	fmt.Printf("  hubscale: starting the hub (%d replica(s)) with %d Subscriptions ...\n", hubscaleReplicas, p.ops)
	t0 := time.Now()
	var hubs []*hsHub
	for i := range hubscaleReplicas {
		h, err := startHubReplica(bin, plane.Kubeconfig, d, i, hubscaleReplicas, hsHubSA, hubscaleHubArgs)
		if err != nil {
			return err
		}
		defer h.stop()
		hubs = append(hubs, h)
	}
	if err := hsAllReady(ctx, c, p.ops, hubs); err != nil {
		b, _ := os.ReadFile(filepath.Join(d, "hub-0.log"))
		return fmt.Errorf("%w; hub-0.log ends:\n%s", err, tail(string(b), 2000))
	}
	res.ready = time.Since(t0)
	fmt.Printf("    every Subscription Ready %s after the hub's start; settling %s\n", res.ready.Round(time.Millisecond), hubscaleSettle)
	idle0 := hubsCPU(hubs)
	time.Sleep(hubscaleSettle)
	res.idleCPU = hubsCPU(hubs) - idle0
	res.point(hubs, fmt.Sprintf("after the initial sync (every Subscription Ready, then %s)", hubscaleSettle))
	for _, h := range hubs {
		res.watches += hubMetrics(h.metrics)["watches"]
	}

	if err := res.warmUp(ctx, cs, sinks); err != nil {
		return err
	}
	if err := res.stream(ctx, cs, plane, hubs, sinks); err != nil {
		return err
	}
	res.measure(sinks)
	fmt.Printf("    one watch p50 %s p99 %s; a watch per namespace p50 %s p99 %s; hub p50 %s p99 %s; waiting %s for the hub's next trim\n", quantile(res.watchLat, .5), quantile(res.watchLat, .99), quantile(res.nsLat, .5), quantile(res.nsLat, .99), quantile(res.hubLat, .5), quantile(res.hubLat, .99), hsTrimWait)
	if hubscaleCSV != "" {
		if err := res.writeCSV(hubscaleCSV); err != nil {
			return err
		}
	}
	idle0 = hubsCPU(hubs)
	time.Sleep(hsTrimWait)
	res.idleAfter = hubsCPU(hubs) - idle0
	res.point(hubs, fmt.Sprintf("%s after the stream", hsTrimWait))
	res.metrics = map[string]float64{}
	for _, h := range hubs {
		for k, v := range hubMetrics(h.metrics) {
			res.metrics[k] += v
		}
	}
	for _, s := range sinks {
		res.refused += s.refused.Load()
		s.mu.Lock()
		for k, v := range s.other {
			res.other[k] += v
		}
		s.mu.Unlock()
	}
	r.add(hubscaleTitle, res.section())
	return nil
}

// stream runs the measured changes, waits until they are delivered and
// seen by the watches, and takes the CPU every process used meanwhile.
func (res *hsResult) stream(ctx context.Context, cs kubernetes.Interface, plane *controlplane.Plane, hubs []*hsHub, sinks []*hsSink) error {
	seq := res.p.stream(hubscaleChanges)
	fmt.Printf("  hubscale: %d changes at %.0f/s ...\n", len(seq), hubscaleRate)
	pids := map[string]int{"suite": os.Getpid()}
	for _, pr := range plane.Processes {
		pids[pr.Name] = pr.PID
	}
	before := map[string]time.Duration{}
	for name, pid := range pids {
		before[name], _ = proc.CPU(pid)
	}
	before["hub"] = hubsCPU(hubs)
	res.load[1] = loadavg()
	start := time.Now()
	res.changes = runStream(ctx, cs, seq, hubscaleRate)
	res.streamTook = time.Since(start)
	for _, ch := range res.changes {
		if ch.err == nil {
			res.expected += len(res.p.subscribers(ch.obj.n, ch.obj.j))
		} else {
			return fmt.Errorf("a change of the stream failed: %w", ch.err)
		}
	}
	res.drain(sinks)
	res.drainTook = time.Since(start) - res.streamTook
	for name, pid := range pids {
		cpu, _ := proc.CPU(pid)
		res.cpu[name] = cpu - before[name]
	}
	res.cpu["hub"] = hubsCPU(hubs) - before["hub"]
	res.load[2] = loadavg()
	res.point(hubs, "right after the stream (every change delivered)")
	res.apiserverRSS = readMem(pids["kube-apiserver"]).rss
	return nil
}

// hubsCPU is the CPU time the hub replicas used so far.
func hubsCPU(hubs []*hsHub) time.Duration {
	var t time.Duration
	for _, h := range hubs {
		cpu, _ := proc.CPU(h.pid())
		t += cpu
	}
	return t
}

// warmUp sends one change per operator, not measured: the hub's first
// delivery to a sink fetches its token (TokenRequest) and dials, the
// sink's first TokenReview; the stream measures the steady state.
func (res *hsResult) warmUp(ctx context.Context, cs kubernetes.Interface, sinks []*hsSink) error {
	fmt.Printf("  hubscale: warm-up, one change per operator ...\n")
	var warm []hsObj
	for i := range res.p.ops {
		tg := res.p.targets(i)
		warm = append(warm, tg[len(tg)-1])
	}
	runStream(ctx, cs, warm, hubscaleRate)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, s := range sinks {
			if s.count() == 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("warm-up: not every sink got its change within a minute: %w", err)
	}
	time.Sleep(2 * time.Second) // a second subscriber's copy
	for _, s := range sinks {
		res.warm += s.count()
	}
	res.warmWatch = [2]int64{res.wAll.n.Load(), res.wNS.n.Load()}
	return nil
}

// hsSetup creates the namespaces, service accounts, RBAC, ConfigMaps and
// ConfigWatchers.
func hsSetup(ctx context.Context, c client.Client, p hsPlan, res *hsResult) error {
	ns, name, _ := strings.Cut(hsHubSA, "/")
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "hubscale-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"k8spatterns.io"}, Resources: []string{"configwatchers"}, Verbs: []string{"get", "list", "watch"}}}},
	}
	for i := range p.ops {
		ns := hsNamespace(i)
		subject := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "op"}}
		role := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "hubscale-reader"}
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op"}})
		if p.kind(i) == hsTeam { // reads every namespace
			objs = append(objs, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "hubscale-" + ns}, Subjects: subject, RoleRef: role})
		} else {
			objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op"}, Subjects: subject, RoleRef: role})
		}
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	fmt.Printf("  hubscale: creating %d ConfigMaps of 1 KiB in %d namespaces ...\n", p.objects, p.ops)
	payload := strings.Repeat("x", 1000)
	t := time.Now()
	err := forEach(ctx, 64, 0, p.objects, func(ctx context.Context, g int) error {
		err := c.Create(ctx, p.configMap(g%p.ops, g/p.ops, payload))
		if g > 0 && g%10_000 == 0 {
			fmt.Printf("    %d created, %s\n", g, time.Since(t).Round(time.Second))
		}
		return err
	})
	if err != nil {
		return err
	}
	res.created = time.Since(t)
	fmt.Printf("    created in %s\n", res.created.Round(time.Second))
	for i := range p.ops {
		for _, cw := range p.configWatchers(i) {
			if err := c.Create(ctx, cw); err != nil {
				return err
			}
		}
	}
	return nil
}

// hsAllReady waits up to 10 minutes for n Ready Subscriptions.
func hsAllReady(ctx context.Context, c client.Client, n int, hubs []*hsHub) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, h := range hubs {
			select {
			case <-h.gone:
				return false, fmt.Errorf("a hub exited")
			default:
			}
		}
		l := &v1alpha1.SubscriptionList{}
		if err := c.List(ctx, l); err != nil {
			return false, nil
		}
		ready := 0
		for _, s := range l.Items {
			for _, cond := range s.Status.Conditions {
				if cond.Type == v1alpha1.SubscriptionReady && cond.Status == metav1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= n, nil
	})
}

// point records the hubs' memory, summed.
func (res *hsResult) point(hubs []*hsHub, what string) {
	var m hsMem
	for _, h := range hubs {
		x := readMem(h.pid())
		m.rss, m.anon, m.file, m.hwm = m.rss+x.rss, m.anon+x.anon, m.file+x.file, m.hwm+x.hwm
	}
	fmt.Printf("    hub memory %s: RSS %.1f MiB (anonymous %.1f, peak %.1f)\n", what, m.rss, m.anon, m.hwm)
	res.points = append(res.points, hsPoint{what, m})
}

// drain waits until every change reached every sink it is for and the
// watch, at most a minute.
func (res *hsResult) drain(sinks []*hsSink) {
	deadline := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		got := 0
		for _, s := range sinks {
			got += s.count()
		}
		n := int64(len(res.changes))
		if got-res.warm >= res.expected && res.wAll.n.Load()-res.warmWatch[0] >= n && res.wNS.n.Load()-res.warmWatch[1] >= n {
			return
		}
		if i%10 == 9 { // a replaced change's event counts for both: match them
			res.measure(sinks)
			if res.hubMissing == 0 && res.watchMissing == 0 && res.nsMissing == 0 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measure matches the changes with what the sinks and the watch saw.
func (res *hsResult) measure(sinks []*hsSink) {
	wa, _ := res.wAll.arrivals()
	na, _ := res.wNS.arrivals()
	all := func(int) bool { return true }
	res.watchLat, res.watchMissing = latencies(res.changes, wa, all)
	res.nsLat, res.nsMissing = latencies(res.changes, na, all)
	watchSeen, nsSeen := seenAfter(res.changes, wa, all), seenAfter(res.changes, na, all)
	res.watchSeen, res.nsSeen, res.hubSeen = watchSeen, nsSeen, make([][]time.Duration, len(sinks))
	res.hubLat, res.resLat, res.refLat, res.behind, res.nsBehind, res.hubMissing = nil, nil, nil, nil, nil, 0
	if res.subs == nil { // change -> the operators it goes to
		res.subs = make([]map[int]bool, len(res.changes))
		for k, ch := range res.changes {
			res.subs[k] = map[int]bool{}
			for _, op := range res.p.subscribers(ch.obj.n, ch.obj.j) {
				res.subs[k][op] = true
			}
		}
	}
	for i, s := range sinks {
		want := func(k int) bool { return res.subs[k][i] }
		ds, miss := latencies(res.changes, s.arrivals(), want)
		res.hubSeen[i] = seenAfter(res.changes, s.arrivals(), want)
		for k, d := range res.hubSeen[i] {
			if d >= 0 && watchSeen[k] >= 0 {
				res.behind = append(res.behind, d-watchSeen[k])
			}
			if d >= 0 && nsSeen[k] >= 0 {
				res.nsBehind = append(res.nsBehind, d-nsSeen[k])
			}
		}
		res.hubLat, res.hubMissing = append(res.hubLat, ds...), res.hubMissing+miss
		if k := res.p.kind(i); k == hsHot || k == hsAll {
			res.resLat = append(res.resLat, ds...)
		} else {
			res.refLat = append(res.refLat, ds...)
		}
	}
	for _, l := range [][]time.Duration{res.hubLat, res.resLat, res.refLat, res.behind, res.nsBehind} {
		sortDurations(l)
	}
}
