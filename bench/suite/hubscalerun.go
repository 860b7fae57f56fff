package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/auth"
)

// hsArrival is one change as a sink or the watch saw it.
type hsArrival struct {
	key string // namespace/name
	at  time.Time
}

// hsSink is one operator's sink: an HTTP receiver that authenticates the
// hub's token as an opzero operator does (internal/auth: a TokenReview for
// its audience, cached, and the hub's service account as the only allowed
// sender) and records when each update event arrived. Nothing reconciles.
type hsSink struct {
	srv     *http.Server
	url     string
	mu      sync.Mutex
	updates []hsArrival
	other   map[string]int // other event types: sweeps, wakeups, adds
	refused atomic.Int64   // answered 401/403/503 by the authentication
}

func startSink(c client.Client, audience, hubSA string) (*hsSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &hsSink{url: "http://" + l.Addr().String() + "/", other: map[string]int{}}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		typ := r.Header.Get("Ce-Type")
		key := r.Header.Get("Ce-Namespace") + "/" + r.Header.Get("Ce-Name")
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		if strings.HasSuffix(typ, ".update") {
			s.updates = append(s.updates, hsArrival{key, at})
		} else {
			s.other[typ]++
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	h := auth.Middleware(auth.Options{Authenticator: auth.NewTokenReviewer(c, audience, 0), Allowed: []string{hubSA}}, inner)
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: 200}
		h.ServeHTTP(rec, r)
		if rec.code >= 400 {
			s.refused.Add(1)
		}
	})}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

func (s *hsSink) arrivals() []hsArrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hsArrival(nil), s.updates...)
}

func (s *hsSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

// hsWatch is the API server's own latency beside the hub's: plain
// client-go watches of the ConfigMaps of some namespaces ("": all), full
// objects in JSON as the hub's Resource-mode watches, one stream each over
// the clientset's connection; the arrival of each update event is recorded
// with the object's key.
type hsWatch struct {
	mu   sync.Mutex
	seen []hsArrival
	n    atomic.Int64
	err  error
}

func startWatch(ctx context.Context, cs kubernetes.Interface, namespaces []string) (*hsWatch, error) {
	w := &hsWatch{}
	for _, ns := range namespaces {
		l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return nil, err
		}
		go w.follow(ctx, cs, ns, l.ResourceVersion)
	}
	return w, nil
}

func (w *hsWatch) follow(ctx context.Context, cs kubernetes.Interface, ns, rv string) {
	for ctx.Err() == nil {
		wi, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			return
		}
		for ev := range wi.ResultChan() {
			at := time.Now()
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			rv = cm.ResourceVersion
			if ev.Type == watch.Modified {
				w.mu.Lock()
				w.seen = append(w.seen, hsArrival{cm.Namespace + "/" + cm.Name, at})
				w.mu.Unlock()
				w.n.Add(1)
			}
		}
	}
}

func (w *hsWatch) arrivals() ([]hsArrival, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]hsArrival(nil), w.seen...), w.err
}

// hsChange is one change of the stream: t0 is written into the object
// (data.t, Unix nanoseconds) just before the patch; ret is when the patch
// returned.
type hsChange struct {
	obj     hsObj
	t0, ret time.Time
	err     error
}

// runStream patches the objects of seq, one every 1/rate seconds
// whatever the API server's answers (at most 256 in flight).
func runStream(ctx context.Context, cs kubernetes.Interface, seq []hsObj, rate float64) []hsChange {
	out := make([]hsChange, len(seq))
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	start := time.Now()
	for i, o := range seq {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t0 := time.Now()
			body := fmt.Sprintf(`{"data":{"t":"%d"}}`, t0.UnixNano())
			_, err := cs.CoreV1().ConfigMaps(hsNamespace(o.n)).Patch(ctx, hsCMName(o.j), types.MergePatchType, []byte(body), metav1.PatchOptions{})
			out[i] = hsChange{obj: o, t0: t0, ret: time.Now(), err: err}
		}()
	}
	wg.Wait()
	return out
}

// seenAfter matches each change with the first arrival of its object at
// or after its t0 (a change replaced by a newer one before it was sent is
// delivered by that one's event): the change's latency, -1 if it failed,
// is not wanted, or nothing arrived.
func seenAfter(changes []hsChange, arrivals []hsArrival, want func(k int) bool) []time.Duration {
	by := map[string][]time.Time{}
	for _, a := range arrivals {
		by[a.key] = append(by[a.key], a.at)
	}
	for _, ts := range by {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	}
	out := make([]time.Duration, len(changes))
	for k, c := range changes {
		out[k] = -1
		if c.err != nil || !want(k) {
			continue
		}
		ts := by[hsNamespace(c.obj.n)+"/"+hsCMName(c.obj.j)]
		if i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(c.t0) }); i < len(ts) {
			out[k] = ts[i].Sub(c.t0)
		}
	}
	return out
}

// latencies are seenAfter's latencies, sorted, and how many wanted
// changes were not seen.
func latencies(changes []hsChange, arrivals []hsArrival, want func(k int) bool) (ds []time.Duration, missing int) {
	for k, d := range seenAfter(changes, arrivals, want) {
		switch {
		case d >= 0:
			ds = append(ds, d)
		case changes[k].err == nil && want(k):
			missing++
		}
	}
	sortDurations(ds)
	return ds, missing
}

// hsHub is one running hub replica.
type hsHub struct {
	cmd     *exec.Cmd
	gone    chan struct{}
	metrics string
}

// startHub starts replica i of n: admin credentials (the bench plane runs
// no kube-controller-manager to aggregate its ClusterRole), its own
// service account's tokens for the sinks, /metrics served; {i} and {n} in
// extra are replaced by the replica's index and count.
func startHubReplica(bin, kubeconfig, logDir string, i, n int, sa, extra string) (*hsHub, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--service-account", sa, "--health-addr", fmt.Sprintf("127.0.0.1:%d", port)}
	for _, f := range strings.Fields(extra) {
		args = append(args, strings.NewReplacer("{i}", strconv.Itoa(i), "{n}", strconv.Itoa(n)).Replace(f))
	}
	log, err := os.Create(filepath.Join(logDir, fmt.Sprintf("hub-%d.log", i)))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Env = append(cmd.Env, profileEnv(fmt.Sprintf("opzero-hub-hubscale-%d", i))...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	h := &hsHub{cmd: cmd, gone: make(chan struct{}), metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	go func() { _ = cmd.Wait(); log.Close(); close(h.gone) }()
	return h, nil
}

func (h *hsHub) pid() int { return h.cmd.Process.Pid }

func (h *hsHub) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.gone:
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.gone
	}
}

// hubMetrics reads the opzero_hub_* figures of a hub's /metrics.
func hubMetrics(url string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && strings.HasPrefix(f[0], "opzero_hub_") {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[strings.TrimPrefix(f[0], "opzero_hub_")] = v
		}
	}
	return out
}

// hsMem is a process's memory from /proc, MiB: VmRSS, RssAnon, RssFile,
// VmHWM.
type hsMem struct{ rss, anon, file, hwm float64 }

func readMem(pid int) hsMem {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var m hsMem
	for _, l := range strings.Split(string(b), "\n") {
		for prefix, dst := range map[string]*float64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file, "VmHWM:": &m.hwm} {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
				*dst = kb / 1024
			}
		}
	}
	return m
}
