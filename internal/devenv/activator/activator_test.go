package activator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/testkit"
)

// TestMain doubles as the backend: with ACTIVATOR_BACKEND=1 the test binary
// is a tiny operator that answers on $PORT after a short start-up.
func TestMain(m *testing.M) {
	if os.Getenv("ACTIVATOR_BACKEND") == "1" {
		time.Sleep(50 * time.Millisecond) // start-up work
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("/self", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, os.Getenv("SELF_URL") == "http://127.0.0.1:"+os.Getenv("PORT"))
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
				time.Sleep(d)
			}
			fmt.Fprintf(w, "pid %d", os.Getpid())
		})
		_ = http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux)
		os.Exit(0)
	}
	if os.Getenv("ACTIVATOR_BACKEND") == "plain" { // a hook: no /healthz, its own readiness path
		mux := http.NewServeMux()
		mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
		mux.HandleFunc("/sync", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "synced") })
		_ = http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux)
		os.Exit(0)
	}
	if os.Getenv("ACTIVATOR_BACKEND") == "crash" {
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func backend(mode string) func() *exec.Cmd {
	return func() *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "ACTIVATOR_BACKEND="+mode)
		return c
	}
}

func serve(t *testing.T, a *Activator) string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	srv := httptest.NewServer(a)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return srv.URL
}

func waitInstances(t *testing.T, a *Activator, n int) {
	t.Helper()
	if !testkit.Wait(10*time.Second, func() bool { return a.Instances() == n }) {
		t.Fatalf("instances %d, want %d", a.Instances(), n)
	}
}

// TestScaleUpToMaxScale: with Concurrency 1 and MaxScale 3, five slow
// requests at once start three instances (no more), every request is
// answered 200, and all instances stop after the idle period.
func TestScaleUpToMaxScale(t *testing.T) {
	var a *Activator
	var events sync.Map
	a = New(Options{Idle: 300 * time.Millisecond, MaxScale: 3, Concurrency: 1, Command: backend("1"),
		OnEvent: func(what string, _ time.Duration) { events.Store(what, a.Instances()) }}) // a listener may ask

	u := serve(t, a)
	var wg sync.WaitGroup
	pids := make([]string, 5)
	for i := range pids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := http.Get(u + "/?sleep=400ms")
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 {
				t.Errorf("request %d: %d %s", i, resp.StatusCode, b)
			}
			pids[i] = string(b)
		}(i)
	}
	wg.Wait()
	distinct := map[string]bool{}
	for _, p := range pids {
		distinct[p] = true
	}
	if a.Starts.Load() != 3 || len(distinct) != 3 || a.ColdStarts.Load() != 1 {
		t.Fatalf("starts %d, distinct instances answering %d, cold starts %d; want 3, 3, 1", a.Starts.Load(), len(distinct), a.ColdStarts.Load())
	}
	waitInstances(t, a, 0)
	for _, e := range []string{"cold-start", "scale-up", "ready", "scale-down", "scaled-to-zero"} {
		if _, ok := events.Load(e); !ok {
			t.Errorf("no %q event", e)
		}
	}
}

// TestFailedStart: an operator that exits at once is answered 503 with
// Retry-After (every Knative sender retries), and is forgotten.
func TestFailedStart(t *testing.T) {
	a := New(Options{Idle: time.Second, Command: backend("crash")})
	u := serve(t, a)
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("answer %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	waitInstances(t, a, 0)
}

func TestScaleFromAndToZero(t *testing.T) {
	a := New(Options{Idle: 300 * time.Millisecond, Command: func() *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "ACTIVATOR_BACKEND=1")
		return c
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(a)
	defer srv.Close()

	if a.Instances() != 0 {
		t.Fatal("an instance runs before any request")
	}
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes { // a burst during the cold start is buffered, not lost
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := http.Get(srv.URL)
			if err == nil {
				codes[i] = resp.StatusCode
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d during the cold start: %d, want 200", i, c)
		}
	}
	if a.ColdStarts.Load() != 1 || a.Instances() != 1 {
		t.Fatalf("cold starts %d, instances %d; want 1 and 1", a.ColdStarts.Load(), a.Instances())
	}
	if !testkit.Wait(5*time.Second, func() bool { return a.Instances() == 0 }) {
		t.Fatal("not scaled to zero after the idle period")
	}
	resp, err := http.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request after scale to zero: %v %v", resp, err)
	}
	resp.Body.Close()
	if a.ColdStarts.Load() != 2 {
		t.Fatalf("cold starts %d, want 2", a.ColdStarts.Load())
	}
}

// TestMinScale: MinScale instances start without a request and are not
// stopped for idleness.
func TestMinScale(t *testing.T) {
	a := New(Options{Idle: 100 * time.Millisecond, MinScale: 1, Command: backend("1")})
	serve(t, a)
	waitInstances(t, a, 1)
	time.Sleep(500 * time.Millisecond)
	if a.Instances() != 1 || a.Starts.Load() != 1 {
		t.Fatalf("instances %d, starts %d after 5 idle periods; want 1 and 1", a.Instances(), a.Starts.Load())
	}
}

// TestTimeoutAnswers504: a request that outlives the revision timeout gets
// 504 naming it, as from Knative; a quick one on the same instance is served.
func TestTimeoutAnswers504(t *testing.T) {
	a := New(Options{Command: backend("1"), Idle: time.Minute, Timeout: 300 * time.Millisecond})
	url := serve(t, a)
	resp, err := http.Get(url + "/?sleep=3s")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "timeoutSeconds") {
		t.Fatalf("slow request: %d %q, want 504 naming the timeout", resp.StatusCode, body)
	}
	resp, err = http.Get(url + "/?sleep=10ms")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("quick request: %d, want 200", resp.StatusCode)
	}
}

// TestServedSaysInstanceAndColdStart: Serve reports the instance that
// answered (the pid it prints) and whether the request paid a cold start:
// the first request at zero instances did, the next one on the warm
// instance did not, and one after scale to zero did again, on a new pid.
func TestServedSaysInstanceAndColdStart(t *testing.T) {
	a := New(Options{Idle: 200 * time.Millisecond, Command: backend("1")})
	serve(t, a) // runs a.Run
	get := func() (Served, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		s := a.Serve(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
		return s, rec.Body.String()
	}
	first, body := get()
	if !first.Cold || body != fmt.Sprintf("pid %d", first.PID) {
		t.Fatalf("first request: %+v, answered %q; want a cold start by the pid that answered", first, body)
	}
	warm, _ := get()
	if warm.Cold || warm.PID != first.PID {
		t.Fatalf("second request: %+v, want pid %d without a cold start", warm, first.PID)
	}
	waitInstances(t, a, 0)
	again, body := get()
	if !again.Cold || again.PID == first.PID || body != fmt.Sprintf("pid %d", again.PID) {
		t.Fatalf("after scale to zero: %+v answered %q, want a cold start of a new instance", again, body)
	}
	crash := New(Options{Idle: time.Second, Command: backend("crash")})
	serve(t, crash)
	rec := httptest.NewRecorder()
	if s := crash.Serve(rec, httptest.NewRequest("GET", "/", nil)); rec.Code != 503 || s.PID == 0 || !s.Cold {
		t.Fatalf("failed start: %d %+v, want 503 naming the instance that did not start", rec.Code, s)
	}
}

// TestAddressEnv: with AddressEnv, each instance finds its own URL in that
// variable (where the other instances reach it); without, nothing is set.
func TestAddressEnv(t *testing.T) {
	for _, env := range []string{"SELF_URL", ""} {
		a := New(Options{Idle: time.Minute, Command: backend("1"), AddressEnv: env})
		resp, err := http.Get(serve(t, a) + "/self")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprint(env != ""); string(b) != want {
			t.Fatalf("AddressEnv %q: the instance's SELF_URL is its own URL: %s, want %s", env, b, want)
		}
	}
}

// TestNoStartAfterShutdown: once Run has ended (every instance stopped), a
// request is answered 503 with Retry-After and starts no instance.
func TestNoStartAfterShutdown(t *testing.T) {
	a := New(Options{Idle: time.Minute, Command: backend("1")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	srv := httptest.NewServer(a)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request before the shutdown: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	<-done
	if n := a.Instances(); n != 0 {
		t.Fatalf("%d instances after Run ended, want 0", n)
	}
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("request after the shutdown: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n, s := a.Instances(), a.Starts.Load(); n != 0 || s != 1 {
		t.Errorf("after a request past the shutdown: %d instances, %d starts; want 0 and 1", n, s)
	}
}

// TestReadinessAsKnative: with no readinessProbe path an instance is ready
// once its port takes a TCP connection (Knative's default), so a process
// that does not answer /healthz serves; with a path, only a 200 there makes
// it ready.
func TestReadinessAsKnative(t *testing.T) {
	a := New(Options{Idle: time.Minute, Command: backend("plain")})
	u := serve(t, a)
	resp, err := http.Get(u + "/sync")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "synced" {
		t.Fatalf("with no readiness path: %d %q, want 200 synced", resp.StatusCode, body)
	}

	var failed sync.Map
	b := New(Options{Idle: time.Minute, Command: backend("plain"), ReadinessPath: "/ready", StartTimeout: 2 * time.Second,
		OnProcess: func(e ProcessEvent) {
			if e.What == ProcessFailed {
				failed.Store("failed", e.Reason)
			}
		}})
	u = serve(t, b)
	resp, err = http.Get(u + "/sync")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatal("an instance whose readiness path answers 503 served a request")
	}
	if _, ok := failed.Load("failed"); !ok {
		t.Fatal("the instance that never became ready was not reported failed")
	}
}

// TestColdStartDelay: with ColdStartDelay, a cold start's instance is
// held back until that long after its exec though it is ready sooner (a
// pod on a node, imitated); the request waits and is answered, and the
// instance reports ready no sooner than the delay.
func TestColdStartDelay(t *testing.T) {
	const delay = 700 * time.Millisecond
	var took atomic.Int64
	a := New(Options{Idle: time.Minute, ColdStartDelay: delay, Command: backend("1"),
		OnProcess: func(e ProcessEvent) {
			if e.What == ProcessReady {
				took.Store(int64(e.Took))
			}
		}})
	url := serve(t, a)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request at zero: %d, want 200", resp.StatusCode)
	}
	if d := time.Duration(took.Load()); d < delay {
		t.Fatalf("the cold start's instance ready %s after exec, want no sooner than the %s delay", d, delay)
	}
}
