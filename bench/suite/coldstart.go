package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/devenv/activator"
)

const ns = "bench"

type env struct {
	configMaps int
	c          client.Client
	scheme     *k8sruntime.Scheme
	kubeconfig string
	dir        string
	cfg        *rest.Config
	etcdURL    string         // the control plane's etcd (the wakeup part loads records into it)
	pids       map[string]int // the control plane's processes by name (etcd, kube-apiserver)
}

// setup creates the namespace and the target ConfigWatcher (and its ConfigMap).
func (e *env) setup(ctx context.Context) error {
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target-config", Namespace: ns}}); err != nil {
		return err
	}
	return e.c.Create(ctx, &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "target-config", PodSelector: map[string]string{"app": "none"}}})
}

// ensureConfigMaps grows the 1 KiB ConfigMaps in the namespace to total.
func (e *env) ensureConfigMaps(ctx context.Context, total int) error {
	payload := strings.Repeat("x", 1024)
	sem := make(chan struct{}, 32)
	errc := make(chan error, total)
	n := 0
	for i := e.configMaps; i < total; i++ {
		n++
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem }()
			errc <- e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Namespace: ns}, Data: map[string]string{"v": payload}})
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			return err
		}
	}
	e.configMaps = total
	return nil
}

// sample is one run of an operator (once).
type sample struct {
	ready, first time.Duration // exec -> ready, exec -> first event reconciled
	mem          rss           // once the first event is reconciled
	// steady is the RSS after steadyEvents more reconciles (serverless
	// variants, when asked); perEvent their median send -> answer.
	steady   rss
	perEvent time.Duration
}

// steadyEvents is how many PingSource events a serverless instance gets
// after its first reconcile before its RSS is read again: a steady-state
// figure, not one taken while start-up's pages are still fresh.
const steadyEvents = 200

// once bumps the target's generation, execs the operator and measures exec
// -> ready and exec -> the target's status showing the new generation;
// with steady, then the RSS after steadyEvents more reconciles.
func (e *env) once(ctx context.Context, name string, steady bool) (sm sample, err error) {
	ready, first, mem, port, stop, err := e.start(ctx, name)
	if stop != nil {
		defer stop.stop()
	}
	if err != nil {
		return sample{}, err
	}
	sm = sample{ready: ready, first: first, mem: mem}
	if steady && name != "controller-runtime" && name != "opzero-classic" {
		ds, err := pings(port, steadyEvents)
		if err != nil {
			return sample{}, fmt.Errorf("%d events after the first: %w", steadyEvents, err)
		}
		time.Sleep(500 * time.Millisecond)
		sm.steady, sm.perEvent = rssMiB(stop.pid), median(ds)
	}
	return sm, nil
}

// stopper stops a started operator; pid is its process.
type stopper struct {
	pid  int
	stop func()
}

// start is once without the steady part: it leaves the operator running
// (stop ends it).
func (e *env) start(ctx context.Context, name string) (ready, first time.Duration, mem rss, port int, stop *stopper, err error) {
	cw := &v1.ConfigWatcher{}
	key := client.ObjectKey{Namespace: ns, Name: "target"}
	if err := e.c.Get(ctx, key, cw); err != nil {
		return 0, 0, rss{}, 0, nil, err
	}
	cw.Spec.PodSelector = map[string]string{"app": "none", "run": fmt.Sprint(time.Now().UnixNano())}
	if err := e.c.Update(ctx, cw); err != nil {
		return 0, 0, rss{}, 0, nil, err
	}
	want := cw.Generation
	if port, err = freePort(); err != nil {
		return 0, 0, rss{}, 0, nil, err
	}
	bin, args := name, []string{}
	var env []string
	switch name {
	case "opzero", "opzero-before":
		args = append(args, "--mode=serverless", "--insecure-no-auth")
	case "opzero-notrim", "opzero-linked": // the trim off (internal/trim): what the builds before it did
		bin, env = strings.TrimSuffix(name, "-notrim"), []string{"OPZERO_TRIM=off"}
		args = append(args, "--mode=serverless", "--insecure-no-auth")
	case "opzero-classic":
		bin, args = "opzero-linked", append(args, "--mode=classic", "--disable-leader-election")
	}
	cmd := exec.Command(filepath.Join(e.dir, bin), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, fmt.Sprintf("PORT=%d", port))
	cmd.Env = append(cmd.Env, env...)
	cmd.Env = append(cmd.Env, profileEnv(name)...)
	stdout, _ := cmd.StdoutPipe()
	readyc := make(chan time.Time, 1)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, rss{}, 0, nil, err
	}
	stop = &stopper{pid: cmd.Process.Pid, stop: func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if s.Text() == "READY" {
				readyc <- time.Now()
			}
		}
	}()
	if name == "opzero" || name == "opzero-notrim" || name == "opzero-linked" || name == "opzero-before" {
		go e.deliver(port, cw, readyc)
	}
	done := make(chan time.Time, 1)
	go func() {
		for {
			got := &v1.ConfigWatcher{}
			if e.c.Get(ctx, key, got) == nil && got.Status.ObservedGeneration >= want {
				done <- time.Now()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	select {
	case t := <-done:
		first = t.Sub(t0)
	case <-time.After(60 * time.Second):
		return 0, 0, rss{}, 0, stop, fmt.Errorf("not reconciled within 60s")
	}
	if name == "opzero-classic" { // it says nothing when its caches have synced
		ready = first
	} else {
		select {
		case t := <-readyc:
			ready = t.Sub(t0)
		case <-time.After(5 * time.Second):
			return 0, 0, rss{}, 0, stop, fmt.Errorf("never ready")
		}
	}
	time.Sleep(500 * time.Millisecond) // settled after the first reconcile
	return ready, first, rssMiB(cmd.Process.Pid), port, stop, nil
}

// pings sends n PingSource events naming the target, one after another,
// to the operator on port, and returns each one's send -> answer time.
func pings(port, n int) ([]time.Duration, error) {
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	data := []byte(fmt.Sprintf(`{"namespace":%q,"name":"target"}`, ns))
	ds := make([]time.Duration, 0, n)
	for range n {
		req, err := cloudevent.NewRequest(context.Background(), url, cloudevent.NewPing("/bench/steady", data), false)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("answer %s", resp.Status)
		}
		ds = append(ds, time.Since(t0))
	}
	return ds, nil
}

// rss is a process's resident memory, MiB: total, file-backed (the
// binary's code and data pages) and anonymous (heap, stacks, runtime).
type rss struct{ total, file, anon float64 }

func rssMiB(pid int) rss {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var r rss
	for _, l := range strings.Split(string(b), "\n") {
		for prefix, dst := range map[string]*float64{"VmRSS:": &r.total, "RssFile:": &r.file, "RssAnon:": &r.anon} {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
				*dst = kb / 1024
			}
		}
	}
	return r
}

// deliver plays the ApiServerSource: it POSTs the update event (Resource
// mode) as soon as the operator accepts connections; ready is when it first
// does.
func (e *env) deliver(port int, cw *v1.ConfigWatcher, readyc chan<- time.Time) {
	gvk, _ := apiutil.GVKForObject(cw, e.scheme)
	cw.GetObjectKind().SetGroupVersionKind(gvk)
	body, _ := json.Marshal(cw)
	ev, _ := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Update, body, "configwatchers")
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	for sent := false; !sent; {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			time.Sleep(500 * time.Microsecond)
			continue
		}
		conn.Close()
		readyc <- time.Now()
		req, _ := cloudevent.NewRequest(context.Background(), url, ev, false)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			sent = true
		}
	}
}

func stats(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := func(d time.Duration) string { return d.Round(time.Millisecond / 10).String() }
	return fmt.Sprintf("%s (%s-%s)", r(median(s)), r(s[0]), r(s[len(s)-1]))
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// viaActivator is a cold start as `opzero dev` runs one: the event reaches
// the activator with no instance running; it execs the operator, waits
// for /healthz, proxies the event and answers once the operator has (2xx:
// reconciled). It returns the event's request -> answer time, checked
// against the API server (the status shows the new generation). With
// audience set, the event carries a token of a ServiceAccount for it and
// the operator reviews it (a TokenReview at the first request).
func (e *env) viaActivator(ctx context.Context, name, audience string) (time.Duration, error) {
	cw := &v1.ConfigWatcher{}
	key := client.ObjectKey{Namespace: ns, Name: "target"}
	if err := e.c.Get(ctx, key, cw); err != nil {
		return 0, err
	}
	cw.Spec.PodSelector = map[string]string{"app": "none", "run": fmt.Sprint(time.Now().UnixNano())}
	if err := e.c.Update(ctx, cw); err != nil {
		return 0, err
	}
	want := cw.Generation
	args := []string{"--mode=serverless", "--insecure-no-auth"}
	var token string
	if audience != "" {
		args = []string{"--mode=serverless", "--audience=" + audience}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-sender"}}
		if err := e.c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
		tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}}}
		if err := e.c.SubResource("token").Create(ctx, sa, tr); err != nil {
			return 0, fmt.Errorf("a token for the sender: %w", err)
		}
		token = tr.Status.Token
	}
	a := activator.New(activator.Options{Idle: time.Hour, Command: func() *exec.Cmd {
		cmd := exec.Command(filepath.Join(e.dir, name), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		return cmd
	}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { a.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	gvk, _ := apiutil.GVKForObject(cw, e.scheme)
	cw.GetObjectKind().SetGroupVersionKind(gvk)
	body, _ := json.Marshal(cw)
	ev, _ := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Update, body, "configwatchers")
	req, err := cloudevent.NewRequest(ctx, "http://activator/", ev, false)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	t0 := time.Now()
	a.ServeHTTP(rec, req)
	took := time.Since(t0)
	if rec.Code/100 != 2 {
		return 0, fmt.Errorf("the activator answered %d: %s", rec.Code, rec.Body.String())
	}
	got := &v1.ConfigWatcher{}
	if err := e.c.Get(ctx, key, got); err != nil || got.Status.ObservedGeneration < want {
		return 0, fmt.Errorf("answered %d but not reconciled (observedGeneration %d, want %d; %v)", rec.Code, got.Status.ObservedGeneration, want, err)
	}
	return took, nil
}
