// Command coldstart measures, side by side in one run on the local control
// plane, how long the ConfigWatcher operator takes from exec to ready and
// from exec to its first event reconciled, as an opzero serverless process
// and as a controller-runtime manager (bench/crbaseline), with the same
// objects present. Median, min and max of -runs runs each.
//
//	go run ./bench/coldstart -objects 2000 -runs 10
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/opzero/opzero/cloudevent"
	"github.com/opzero/opzero/devenv/controlplane"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
)

const ns = "bench"

type env struct {
	c          client.Client
	scheme     *k8sruntime.Scheme
	kubeconfig string
	dir        string
}

func main() {
	objects := flag.Int("objects", 2000, "ConfigMaps (1 KiB each) present in the cluster")
	runs := flag.Int("runs", 10, "runs per operator")
	flag.Parse()
	if err := run(*objects, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart:", err)
		os.Exit(1)
	}
}

func run(objects, runs int) error {
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "opzero-coldstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("building the operators ...\n")
	for name, pkg := range map[string]string{"opzero": "./examples/configwatcher", "controller-runtime": "./bench/crbaseline"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	fmt.Printf("starting the control plane and creating %d ConfigMaps ...\n", objects)
	plane, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(dir, "plane"), DieWithParent: true, NoControllerManager: true})
	if err != nil {
		return err
	}
	defer plane.Stop(false)
	if _, err := controlplane.InstallCRDs(ctx, plane.Config, filepath.Join(root, "examples/configwatcher/config/crd")); err != nil {
		return err
	}
	e := &env{kubeconfig: plane.Kubeconfig, dir: dir, scheme: k8sruntime.NewScheme()}
	_ = clientgoscheme.AddToScheme(e.scheme)
	_ = v1.AddToScheme(e.scheme)
	cfg := *plane.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	if e.c, err = client.New(&cfg, client.Options{Scheme: e.scheme}); err != nil {
		return err
	}
	if err := e.populate(ctx, objects); err != nil {
		return err
	}
	results := map[string][2][]time.Duration{}
	for _, name := range []string{"opzero", "controller-runtime"} {
		var ready, first []time.Duration
		for i := 0; i < runs; i++ {
			r, f, err := e.once(ctx, name)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", name, i+1, err)
			}
			ready, first = append(ready, r), append(first, f)
		}
		results[name] = [2][]time.Duration{ready, first}
	}
	report(objects, runs, results)
	return nil
}

func (e *env) populate(ctx context.Context, n int) error {
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	payload := strings.Repeat("x", 1024)
	sem := make(chan struct{}, 32)
	errc := make(chan error, n)
	for i := 0; i < n; i++ {
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
	if err := e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "target-config", Namespace: ns}}); err != nil {
		return err
	}
	return e.c.Create(ctx, &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "target-config", PodSelector: map[string]string{"app": "none"}}})
}

// once bumps the target's generation, execs the operator and measures exec
// -> ready and exec -> the target's status showing the new generation.
func (e *env) once(ctx context.Context, name string) (ready, first time.Duration, err error) {
	cw := &v1.ConfigWatcher{}
	key := client.ObjectKey{Namespace: ns, Name: "target"}
	if err := e.c.Get(ctx, key, cw); err != nil {
		return 0, 0, err
	}
	cw.Spec.PodSelector = map[string]string{"app": "none", "run": fmt.Sprint(time.Now().UnixNano())}
	if err := e.c.Update(ctx, cw); err != nil {
		return 0, 0, err
	}
	want := cw.Generation
	port, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	args := []string{}
	if name == "opzero" {
		args = append(args, "--mode=serverless", "--insecure-no-auth")
	}
	cmd := exec.Command(filepath.Join(e.dir, name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, fmt.Sprintf("PORT=%d", port))
	stdout, _ := cmd.StdoutPipe()
	readyc := make(chan time.Time, 1)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if s.Text() == "READY" {
				readyc <- time.Now()
			}
		}
	}()
	if name == "opzero" {
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
		return 0, 0, fmt.Errorf("not reconciled within 60s")
	}
	select {
	case t := <-readyc:
		ready = t.Sub(t0)
	case <-time.After(5 * time.Second):
		return 0, 0, fmt.Errorf("never ready")
	}
	return ready, first, nil
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

func report(objects, runs int, res map[string][2][]time.Duration) {
	host, _ := os.Hostname()
	fmt.Printf("\nexec -> ready and exec -> first event reconciled, %d ConfigMaps of 1 KiB present, %d runs each\n", objects, runs)
	fmt.Printf("machine: %s, %d CPUs, %s/%s, %s\n\n", host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("%-20s %-32s %-32s\n", "operator", "exec -> ready  median (min-max)", "exec -> reconciled  median (min-max)")
	for _, name := range []string{"controller-runtime", "opzero"} {
		r := res[name]
		fmt.Printf("%-20s %-32s %-32s\n", name, stats(r[0]), stats(r[1]))
	}
	cr, oz := median(res["controller-runtime"][1]), median(res["opzero"][1])
	fmt.Printf("\nexec -> first event reconciled: opzero serverless is %.1fx faster than controller-runtime (median %s vs %s)\n",
		float64(cr)/float64(oz), oz.Round(time.Millisecond/10), cr.Round(time.Millisecond/10))
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
