package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/devenv/balancer"
)

const (
	soObjects = 200
	soSenders = 16
	// The steady stream: soStreamObjects objects, soStreamEvents events
	// each, interleaved (every object's first event, then every second...):
	// each object's events keep coming, well within --lease-keep-idle.
	soStreamObjects = 10
	soStreamEvents  = 40
)

// scaleOut: 200 ConfigWatchers whose reconcile makes a 50 ms external call
// (internal/testop, script "external"), one event each through a
// round-robin balancer over 1, 2 and 4 engine processes, each reconciling
// one key at a time (--max-concurrent-reconciles=1, as containerConcurrency
// 1 would; taking and releasing Leases does not hold that slot:
// internal/engine/serverless/slot.go). One instance runs without Leases
// (max-scale 1) and with them (max-scale 4, one instance up); 2 and 4
// serialize keys with Leases. Lease writes per reconcile come from the API
// server's own request counters.
func (e *env) scaleOut(ctx context.Context, r *report, runs int) error {
	type variant struct {
		n      int
		leases bool
		mode   cloudevent.Mode
	}
	resource, reference := cloudevent.Resource, cloudevent.Reference
	variants := []variant{{1, false, resource}, {1, true, resource}, {2, true, resource}, {4, true, resource}, {1, false, reference}, {4, true, reference}}
	res := map[variant][]float64{}
	leaseWrites, reconciles := map[variant]float64{}, map[variant]float64{}
	for i := 0; i < runs; i++ {
		for _, v := range variants {
			fmt.Printf("  scale-out %d instance(s), leases %v, %s mode, run %d ...\n", v.n, v.leases, v.mode, i+1)
			maxScale := 1
			if v.leases {
				maxScale = 4
			}
			rate, lw, rc, err := e.scaleOutOnce(ctx, v.n, maxScale, fmt.Sprintf("so-%d-%v-%s-%d", v.n, v.leases, strings.ToLower(string(v.mode)), i), soObjects, 1, v.mode)
			if err != nil {
				return fmt.Errorf("scale-out with %d instances: %w", v.n, err)
			}
			res[v] = append(res[v], rate)
			leaseWrites[v] += lw
			reconciles[v] += rc
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d ConfigWatchers, one event each, sent at concurrency %d through a round-robin balancer; each reconcile makes a 50 ms external call and writes the status; each instance reconciles one key at a time (`--max-concurrent-reconciles=1`; its Lease writes do not take that slot, so one key's Lease is taken while another reconciles). Resource mode is what the wiring `opzero manifests` generates sends: the event's object stands in for the reconcile's GET of it, so a reconcile makes the status write and, with Leases, the Lease's create and delete; in Reference mode the reconcile GETs the object too. Objects per second until all have observedGeneration == generation, median (min-max) of %d runs; ratios against one instance at max-scale 1 in the same mode. Lease writes per reconcile: the API server's `apiserver_request_total` for leases over the status writes, all runs (the API server's own heartbeat Lease adds ~0.01).\n\n", soObjects, soSenders, runs)
	fmt.Fprintf(&b, "| events | instances | max-scale (locking) | objects/s | vs 1 instance, max-scale 1 | vs 1 instance, max-scale 4 | lease writes per reconcile |\n|---|---|---|---|---|---|---|\n")
	one := map[cloudevent.Mode]float64{resource: fmedian(res[variants[0]]), reference: fmedian(res[variants[4]])}
	oneLeased := fmedian(res[variants[1]])
	for _, v := range variants {
		lock := "1 (in memory)"
		if v.leases {
			lock = "4 (Leases)"
		}
		m := fmedian(res[v])
		vsLeased := "-"
		if v.mode == resource {
			vsLeased = fmt.Sprintf("%.2fx", m/oneLeased)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %.2fx | %s | %.2f |\n", v.mode, v.n, lock, fstatsInt(res[v]), m/one[v.mode], vsLeased, leaseWrites[v]/reconciles[v])
		switch {
		case v.n == 4 && v.mode == resource:
			r.fig("so-4x", m/one[resource])
		case v.n == 4:
			r.fig("so-4x-ref", m/one[reference])
		}
	}
	b.WriteString("\nThe Lease of a key is kept between its reconciles while events for it keep coming (`--lease-keep-idle`, default 1s) and deleted once it has had none for that long; these rows count the deletes too (each run waits until no Lease is left).\n")
	if err := e.leaseStream(ctx, r, &b, runs); err != nil {
		return err
	}
	r.add("Scale-out", b.String())
	return nil
}

// leaseStream: a steady stream (soStreamObjects objects, soStreamEvents
// events each, interleaved) through the balancer, 1 and 4 instances at
// max-scale 4: Leases kept while warm with events forwarded to the holder
// (the default in a pod), kept with the holder's Lease marked instead (no
// --advertise-address: the engine before forwarding), and released after
// every reconcile (--lease-keep-idle=-1ns, the engine before keeping):
// Lease writes per reconcile.
func (e *env) leaseStream(ctx context.Context, r *report, b *strings.Builder, runs int) error {
	type variant struct {
		n             int
		keep, forward bool
	}
	variants := []variant{{1, false, false}, {1, true, true}, {4, false, false}, {4, true, false}, {4, true, true}}
	res := map[variant][]float64{}
	leaseWrites, reconciles := map[variant]float64{}, map[variant]float64{}
	for i := 0; i < runs; i++ {
		for _, v := range variants {
			fmt.Printf("  lease stream %d instance(s), keep %v, forward %v, run %d ...\n", v.n, v.keep, v.forward, i+1)
			var extra []string
			if !v.keep {
				extra = append(extra, "--lease-keep-idle=-1ns")
			}
			if v.forward {
				extra = append(extra, advertiseSelf)
			}
			rate, lw, rc, err := e.scaleOutOnce(ctx, v.n, 4, fmt.Sprintf("ls-%d-%v-%v-%d", v.n, v.keep, v.forward, i), soStreamObjects, soStreamEvents, cloudevent.Reference, extra...)
			if err != nil {
				return fmt.Errorf("lease stream with %d instances: %w", v.n, err)
			}
			res[v] = append(res[v], rate)
			leaseWrites[v] += lw
			reconciles[v] += rc
		}
	}
	fmt.Fprintf(b, "\nA steady stream: %d ConfigWatchers, %d events each, interleaved, sent as above in Reference mode (max-scale 4, Leases); events per second until every send is answered and no Lease is left, median (min-max) of %d runs; Lease writes and reconciles (status writes), all runs. An event for a key another instance holds is forwarded to the holder (each instance's `--advertise-address`, recorded on the Leases it holds; the default in a pod) or, without addresses (the engine before forwarding), marks the holder's Lease. Lease writes count every request but reads, refused ones too: a create the API server refuses (409, the key held elsewhere) is one.\n\n", soStreamObjects, soStreamEvents, runs)
	fmt.Fprintf(b, "| instances | Lease kept while warm | events for other instances' keys | events/s | reconciles per event | lease writes per reconcile | lease writes per event |\n|---|---|---|---|---|---|---|\n")
	events := float64(soStreamObjects * soStreamEvents * runs)
	for _, v := range variants {
		keep, other := "no (released after each reconcile)", "mark the Lease"
		if v.keep {
			keep = "yes (default, 1s idle)"
		}
		switch {
		case v.n == 1:
			other = "-"
		case v.forward:
			other = "forwarded to the holder (default)"
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %.2f | %.2f | %.2f |\n", v.n, keep, other, fstatsInt(res[v]), reconciles[v]/events, leaseWrites[v]/reconciles[v], leaseWrites[v]/events)
		if v.n == 4 {
			r.fig(map[variant]string{{4, false, false}: "ls-4-false", {4, true, false}: "ls-4-mark", {4, true, true}: "ls-4-true"}[v], leaseWrites[v]/reconciles[v])
		}
	}
	return nil
}

// advertiseSelf, among scaleOutOnce's extra arguments, is each instance's
// --advertise-address: its own URL.
const advertiseSelf = "--advertise-address=self"

// scaleOutOnce sends events events to each of objects ConfigWatchers through
// a balancer over n instances and returns events per second until every
// object has converged (and, with Leases, none is left), and the Lease and
// status writes the API server counted meanwhile.
func (e *env) scaleOutOnce(ctx context.Context, n, maxScale int, ns string, objects, events int, mode cloudevent.Mode, extra ...string) (rate, leaseWrites, reconciles float64, err error) {
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return 0, 0, 0, err
	}
	cws := make([]*v1.ConfigWatcher, objects)
	for i := range cws {
		cws[i] = &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cw-%04d", i)},
			Spec: v1.ConfigWatcherSpec{ConfigMap: "external", PodSelector: map[string]string{"app": "x"}}}
		if err := e.c.Create(ctx, cws[i]); err != nil {
			return 0, 0, 0, err
		}
	}
	var urls []string
	for i := 0; i < n; i++ {
		port, err := freePort()
		if err != nil {
			return 0, 0, 0, err
		}
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		args := append([]string{"--mode=serverless", "--insecure-no-auth",
			"--max-concurrent-reconciles=1", "--max-scale=" + strconv.Itoa(maxScale), "--lease-duration=10s"}, extra...)
		for i, a := range args {
			if a == advertiseSelf {
				args[i] = "--advertise-address=" + url
			}
		}
		cmd := exec.Command(filepath.Join(e.dir, "testop"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "PORT="+strconv.Itoa(port))
		cmd.Env = append(cmd.Env, profileEnv(fmt.Sprintf("testop-%s-i%d", ns, i))...)
		if err := cmd.Start(); err != nil {
			return 0, 0, 0, err
		}
		// SIGTERM, so that a profiled instance (-pprof) writes its profiles
		defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
		if err := waitHealthy(url); err != nil {
			return 0, 0, 0, err
		}
		urls = append(urls, url)
	}
	front := httptest.NewServer(balancer.New(urls...))
	defer front.Close()

	conv, err := e.watchConvergence(ctx, ns)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conv.close()
	before, err := e.requestCounts(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	if pprofDir != "" {
		defer e.profileAPIServer(ctx, "kube-apiserver-"+ns)()
	}
	// Every object's first event, then every second...; the first failure
	// stops the sending.
	if err := forEach(ctx, soSenders, 0, objects*events, func(_ context.Context, i int) error {
		return deliverEvent(front.URL, cws[i%objects], mode)
	}); err != nil {
		return 0, 0, 0, err
	}
	if err := conv.wait(ctx, objects, t0, 3*time.Minute, nil); err != nil {
		return 0, 0, 0, err
	}
	d := time.Since(t0)
	// Kept Leases are deleted once idle: count those writes too.
	for maxScale > 1 && e.leasesLeft(ctx) != 0 {
		if time.Since(t0) > 3*time.Minute {
			return 0, 0, 0, fmt.Errorf("%d Leases left after 3 minutes", e.leasesLeft(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
	after, err := e.requestCounts(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(objects*events) / d.Seconds(), after.leaseWrites - before.leaseWrites, after.statusWrites - before.statusWrites, nil
}

// apiServerProfile is how long profileAPIServer profiles: the 4-instance
// phase of scaleOut lasts ~3 s.
const apiServerProfile = 3 * time.Second

// profileAPIServer starts a CPU profile of the API server (-pprof starts it
// with --profiling) for apiServerProfile, written to <-pprof>/name.cpu.pprof;
// wait waits for it. A failure is reported, not returned: the profile is
// an aid.
func (e *env) profileAPIServer(ctx context.Context, name string) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := func() error {
			cs, err := kubernetes.NewForConfig(e.cfg)
			if err != nil {
				return err
			}
			raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", strconv.Itoa(int(apiServerProfile/time.Second))).DoRaw(ctx)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(pprofDir, name+".cpu.pprof"), raw, 0o644)
		}()
		if err != nil {
			fmt.Fprintf(os.Stderr, "  the API server's CPU profile %s: %v\n", name, err)
		}
	}()
	return func() { <-done }
}

// leasesLeft counts the per-key Leases of opzero operators (all runs use
// the default namespace); -1 if they cannot be listed.
func (e *env) leasesLeft(ctx context.Context) int {
	list := &coordinationv1.LeaseList{}
	if err := e.c.List(ctx, list, client.InNamespace("default"), client.HasLabels{"opzero.dev/operator"}); err != nil {
		return -1
	}
	return len(list.Items)
}

func waitHealthy(url string) error {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
	}
	return fmt.Errorf("%s not up after 20 s", url)
}

// deliverEvent sends cw's update event in mode and wants a 200.
func deliverEvent(url string, cw *v1.ConfigWatcher, mode cloudevent.Mode) error {
	obj := cw.DeepCopy()
	obj.SetGroupVersionKind(v1.GroupVersion.WithKind("ConfigWatcher"))
	b, _ := json.Marshal(obj)
	ev, err := cloudevent.NewObjectEvent(mode, cloudevent.Update, b, "configwatchers")
	if err != nil {
		return err
	}
	req, err := cloudevent.NewRequest(context.Background(), url, ev, false)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("event for %s: %s", cw.Name, resp.Status)
	}
	return nil
}

type counts struct{ leaseWrites, statusWrites float64 }

// requestCounts reads the API server's apiserver_request_total: writes to
// Leases, and status writes of ConfigWatchers (one per reconcile here).
func (e *env) requestCounts(ctx context.Context) (counts, error) {
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		return counts{}, err
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return counts{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	m, err := parseMetrics(bytes.NewReader(raw))
	if err != nil {
		return counts{}, fmt.Errorf("the API server's metrics: %w", err)
	}
	write := func(l map[string]string) bool {
		return l["verb"] != "GET" && l["verb"] != "LIST" && l["verb"] != "WATCH"
	}
	var c counts
	c.leaseWrites, _ = m.sum("apiserver_request_total", func(l map[string]string) bool { return write(l) && l["resource"] == "leases" })
	c.statusWrites, _ = m.sum("apiserver_request_total", func(l map[string]string) bool {
		return write(l) && l["resource"] == "configwatchers" && l["subresource"] == "status"
	})
	return c, nil
}
