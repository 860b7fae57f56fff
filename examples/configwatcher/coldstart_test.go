package main_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/testenv"
)

// The cold-start harness (issue 39): it execs the configwatcher binary as
// Knative runs it in the hub wiring (the generated manifests' arguments:
// sender authentication, --event-cache, --wakeup-sink, max-scale 3, so a
// Lease), with its API server behind a recording proxy, and times each
// phase from exec to the first event's answer: the Go runtime's package
// initialisation (GODEBUG=inittrace=1), the process's own log lines as
// they arrive, the listener's first accepted connection (what a TCP or
// HTTP readiness probe sees), and every API request with its start and
// end. TestColdStartPhases asserts what the first event's path must not
// contain; with OPZERO_COLDSTART_RUNS=N it runs N cold starts and prints
// each phase's median (docs/real-knative.md, cold start).

// apiCall is one request the operator made to the API server.
type apiCall struct {
	start, end time.Time
	method     string
	path       string // with the query
	conn       int    // the proxy's number of the connection that carried it
}

// apiRecorder is a TLS (HTTP/2) reverse proxy to the API server that
// records every request and every connection opened to it.
type apiRecorder struct {
	srv *httptest.Server

	mu    sync.Mutex
	calls []apiCall
	conns []time.Time // when each connection was accepted
	ids   map[string]int
}

func newAPIRecorder(t *testing.T, cfg *rest.Config) *apiRecorder {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = tr
	p.FlushInterval = -1 // watches stream
	a := &apiRecorder{ids: map[string]int{}}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := apiCall{start: time.Now(), method: r.Method, path: r.URL.RequestURI()}
		a.mu.Lock()
		c.conn = a.ids[r.RemoteAddr]
		a.mu.Unlock()
		r.Header.Del("Authorization") // the proxy's own credentials go upstream
		p.ServeHTTP(w, r)
		c.end = time.Now()
		a.mu.Lock()
		a.calls = append(a.calls, c)
		a.mu.Unlock()
	}))
	a.srv.EnableHTTP2 = true
	a.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			a.mu.Lock()
			a.conns = append(a.conns, time.Now())
			a.ids[c.RemoteAddr().String()] = len(a.conns)
			a.mu.Unlock()
		}
	}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

// kubeconfig writes a kubeconfig for the proxy (its certificate trusted,
// no credentials: the proxy adds its own).
func (a *apiRecorder) kubeconfig(t *testing.T) string {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: proxy
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: anyone
  user: {token: unused}
contexts:
- name: proxy
  context: {cluster: proxy, user: anyone}
current-context: proxy
`, a.srv.URL, base64.StdEncoding.EncodeToString(ca))
	f := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (a *apiRecorder) snapshot() ([]apiCall, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	calls := slices.Clone(a.calls)
	sort.Slice(calls, func(i, j int) bool { return calls[i].start.Before(calls[j].start) })
	return calls, slices.Clone(a.conns)
}

// coldStart is one cold start's timeline, each time since the exec.
type coldStart struct {
	exec        time.Time
	mainAt      time.Duration            // the runtime's last package init done: main starts
	lines       map[string]time.Duration // the first log line with each msg, as it arrived
	accepting   time.Duration            // the first TCP connection accepted
	sent, answd time.Duration            // the event sent, its answer read
	answer      string                   // status and Opzero-Result
	calls       []apiCall
	conns       []time.Time
}

// since is t relative to the exec.
func (c *coldStart) since(t time.Time) time.Duration { return t.Sub(c.exec) }

// eventCalls are the API requests made while the first event was handled.
func (c *coldStart) eventCalls() []apiCall {
	var out []apiCall
	for _, k := range c.calls {
		if at := c.since(k.start); at >= c.sent && at <= c.answd {
			out = append(out, k)
		}
	}
	return out
}

var (
	coldBinOnce sync.Once
	coldBin     string
	coldBinErr  error
)

// servelessBinary builds the example as deployed: the default build,
// serverless only (TestMain's also links classic mode).
func serverlessBinary(t *testing.T) string {
	coldBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "configwatcher-coldstart-")
		if err != nil {
			coldBinErr = err
			return
		}
		coldBin = filepath.Join(dir, "configwatcher")
		if out, err := exec.Command("go", "build", "-o", coldBin, ".").CombinedOutput(); err != nil {
			coldBinErr = fmt.Errorf("building the operator: %v\n%s", err, out)
		}
	})
	if coldBinErr != nil {
		t.Fatal(coldBinErr)
	}
	return coldBin
}

// coldFixture is a namespace with a ConfigWatcher whose ConfigMap has just
// changed since its last reconcile, a pod it selects, and a sender's token.
type coldFixture struct {
	ns, token, audience, sender string
	cm                          *corev1.ConfigMap
}

func newColdFixture(t *testing.T, env *testenv.Env) *coldFixture {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	f := &coldFixture{ns: env.Namespace(t)}
	f.audience = "opzero:" + f.ns + ":configwatcher"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "opzero-hub"}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	f.sender = "system:serviceaccount:" + f.ns + ":opzero-hub"
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{f.audience}}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	f.token = tr.Status.Token
	f.cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "app-config"}, Data: map[string]string{"v": "1"}}
	if err := c.Create(ctx, f.cm); err != nil {
		t.Fatal(err)
	}
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "watcher"},
		Spec: v1.ConfigWatcherSpec{ConfigMap: f.cm.Name, PodSelector: map[string]string{"app": "web"}}}
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	cw.Status.ConfigMapVersion = f.cm.ResourceVersion // reconciled once, before the change
	cw.Status.ObservedGeneration = cw.Generation
	if err := c.Status().Update(ctx, cw); err != nil {
		t.Fatal(err)
	}
	f.cm.Data["v"] = "2"
	if err := c.Update(ctx, f.cm); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return f
}

// event is the hub's delivery of the ConfigMap's update (Resource mode).
func (f *coldFixture) event(t *testing.T, port int) *http.Request {
	t.Helper()
	obj := f.cm.DeepCopy()
	obj.APIVersion, obj.Kind = "v1", "ConfigMap"
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := cloudevent.NewObjectEvent(cloudevent.Resource, cloudevent.Update, body, "configmaps")
	if err != nil {
		t.Fatal(err)
	}
	req, err := cloudevent.NewRequest(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/", port), ev, false)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	return req
}

// inittrace is a line of GODEBUG=inittrace=1: "init <pkg> @<ms> ms, <ms> ms clock, ...".
var inittrace = regexp.MustCompile(`^init \S+ @([0-9.]+) ms, ([0-9.]+) ms clock`)

// runColdStart execs the operator (a fresh process, the API server behind
// a fresh proxy), waits until it accepts connections, then hold, then
// sends the ConfigMap's event and reads the answer; it returns once the
// operator has gone idle after it.
func runColdStart(t *testing.T, env *testenv.Env, hold time.Duration) *coldStart {
	t.Helper()
	bin := serverlessBinary(t)
	f := newColdFixture(t, env)
	api := newAPIRecorder(t, env.Config)
	kubeconfig := api.kubeconfig(t)
	port := freePort(t)
	cmd := exec.Command(bin, "--mode=serverless", "--audience="+f.audience, "--allowed-senders="+f.sender,
		"--event-cache", "--wakeup-sink=http://127.0.0.1:1")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, fmt.Sprintf("PORT=%d", port),
		"OPZERO_MAX_SCALE=3", "POD_NAMESPACE="+f.ns, "GODEBUG=inittrace=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cs := &coldStart{lines: map[string]time.Duration{}}
	var mu sync.Mutex
	var initEnd float64 // ms after the runtime started
	var logTail []string
	linesDone := make(chan struct{})
	cs.exec = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		defer close(linesDone)
		s := bufio.NewScanner(stderr)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			at := time.Since(cs.exec)
			line := s.Text()
			mu.Lock()
			if m := inittrace.FindStringSubmatch(line); m != nil {
				a, _ := strconv.ParseFloat(m[1], 64)
				d, _ := strconv.ParseFloat(m[2], 64)
				initEnd = max(initEnd, a+d)
			} else {
				logTail = append(logTail, line)
				var l struct{ Msg string }
				if json.Unmarshal([]byte(line), &l) == nil && l.Msg != "" {
					if _, ok := cs.lines[l.Msg]; !ok {
						cs.lines[l.Msg] = at
					}
				}
			}
			mu.Unlock()
		}
	}()
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			cs.accepting = time.Since(cs.exec)
			c.Close()
			break
		}
		if time.Since(cs.exec) > 20*time.Second {
			t.Fatalf("the operator did not accept connections within 20s: %v", err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	time.Sleep(hold)
	req := f.event(t, port)
	cs.sent = time.Since(cs.exec)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cs.answd = time.Since(cs.exec)
	cs.answer = fmt.Sprintf("%d %s", resp.StatusCode, firstOf(resp.Header.Get("Opzero-Result"), strings.TrimSpace(string(b))))
	time.Sleep(300 * time.Millisecond) // whatever follows the answer (the Lease kept idle: not on the path)
	_ = cmd.Process.Signal(os.Interrupt)
	<-linesDone
	_ = cmd.Wait()
	mu.Lock()
	cs.mainAt = time.Duration(initEnd * float64(time.Millisecond))
	tail := logTail
	mu.Unlock()
	cs.calls, cs.conns = api.snapshot()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the event was answered %s; the operator's log:\n%s", cs.answer, strings.Join(tail, "\n"))
	}
	return cs
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// printColdStarts logs the phases' medians over runs and the first run's
// API calls one by one.
func printColdStarts(t *testing.T, hold time.Duration, runs []*coldStart) {
	t.Helper()
	med := func(f func(*coldStart) (time.Duration, bool)) string {
		var ds []time.Duration
		for _, r := range runs {
			if d, ok := f(r); ok {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			return "-"
		}
		slices.Sort(ds)
		m := ds[len(ds)/2]
		if len(ds)%2 == 0 {
			m = (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
		}
		return fmt.Sprintf("%.1f ms (%.1f-%.1f)", ms(m), ms(ds[0]), ms(ds[len(ds)-1]))
	}
	line := func(msg string) func(*coldStart) (time.Duration, bool) {
		return func(c *coldStart) (time.Duration, bool) { d, ok := c.lines[msg]; return d, ok }
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FIGURE cold start phases, %d runs, event sent %s after the listener accepted (median (min-max), since exec):\n", len(runs), hold)
	fmt.Fprintf(&b, "| phase | since exec |\n|---|---|\n")
	row := func(name string, f func(*coldStart) (time.Duration, bool)) {
		fmt.Fprintf(&b, "| %s | %s |\n", name, med(f))
	}
	row("runtime init done, main starts (inittrace)", func(c *coldStart) (time.Duration, bool) { return c.mainAt, true })
	row("first API request (warm-up)", func(c *coldStart) (time.Duration, bool) {
		if len(c.calls) == 0 {
			return 0, false
		}
		return c.since(c.calls[0].start), true
	})
	row("log: starting (client, scheme, engine set up)", line("starting"))
	row("listener accepting (TCP probe)", func(c *coldStart) (time.Duration, bool) { return c.accepting, true })
	row("log: serverless operator listening", line("serverless operator listening"))
	row("log: API discovery warm", line("API discovery warm"))
	row("event sent", func(c *coldStart) (time.Duration, bool) { return c.sent, true })
	row("answered", func(c *coldStart) (time.Duration, bool) { return c.answd, true })
	row("event -> answer", func(c *coldStart) (time.Duration, bool) { return c.answd - c.sent, true })
	row("API requests during the event (count as ms)", func(c *coldStart) (time.Duration, bool) {
		return time.Duration(len(c.eventCalls())) * time.Millisecond, true
	})
	row("connections opened to the API server (count as ms)", func(c *coldStart) (time.Duration, bool) {
		return time.Duration(len(c.conns)) * time.Millisecond, true
	})
	r := runs[len(runs)-1]
	fmt.Fprintf(&b, "the last run's API requests (start-end since exec, connection):\n")
	for _, k := range r.calls {
		mark := ""
		if at := r.since(k.start); at >= r.sent && at <= r.answd {
			mark = " <- the event's"
		}
		fmt.Fprintf(&b, "  %7.1f-%7.1f ms  conn %d  %s %s%s\n", ms(r.since(k.start)), ms(r.since(k.end)), k.conn, k.method, k.path, mark)
	}
	fmt.Fprintf(&b, "answer: %s", r.answer)
	t.Log(b.String())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestColdStartPhases: the first event of a freshly started operator, as
// deployed in the hub wiring, is answered 200 once reconciled, and its
// handling makes only the calls the reconcile needs.
func TestColdStartPhases(t *testing.T) {
	env := testenv.Get(t)
	n := 1
	if s := os.Getenv("OPZERO_COLDSTART_RUNS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, hold := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprintf("hold=%s", hold), func(t *testing.T) {
			var runs []*coldStart
			for range n {
				runs = append(runs, runColdStart(t, env, hold))
			}
			printColdStarts(t, hold, runs)
			for i, r := range runs {
				checkFirstEvent(t, i, hold, r)
			}
		})
	}
}

// firstEventCalls are the API requests of the first event once the
// operator has warmed (the event comes after Knative's probes): the
// sender's TokenReview, the mapping's list, then the reconcile's own
// (the pods' list, the delete, then the Event and the status at once: the
// Event is written while the reconcile goes on, and before the answer).
// Not among them: discovery (warmed), the sole Lease's create and list
// and the Wakeups' list (taken and made while warming), the ConfigMap
// (the event delivered it: the event cache serves it while alone), the
// ConfigWatcher (the mapping's list returned it: it stands in for the Get).
var firstEventCalls = []string{
	"POST /apis/authentication.k8s.io/v1/tokenreviews",
	"GET /apis/k8spatterns.io/v1/namespaces/NS/configwatchers",
	"GET /api/v1/namespaces/NS/pods",
	"DELETE /api/v1/namespaces/NS/pods/web",
	"POST /apis/events.k8s.io/v1/namespaces/NS/events",
	"PUT /apis/k8spatterns.io/v1/namespaces/NS/configwatchers/watcher/status",
}

var nsInPath = regexp.MustCompile(`/namespaces/[^/]+`)

// checkFirstEvent: with the event after the warm-up, its calls are
// firstEventCalls exactly; in any case no group-version is discovered
// twice and nothing discovers the whole API (/api, /apis).
func checkFirstEvent(t *testing.T, run int, hold time.Duration, c *coldStart) {
	t.Helper()
	seen := map[string]int{}
	for _, k := range c.calls {
		p, _, _ := strings.Cut(k.path, "?")
		if p == "/api" || p == "/apis" {
			t.Errorf("run %d: a discovery of the whole API: %s %s", run, k.method, k.path)
		}
		if k.method == http.MethodGet && discoveryPaths.MatchString(p) {
			if seen[p]++; seen[p] > 1 {
				t.Errorf("run %d: %s discovered twice", run, p)
			}
		}
	}
	if hold == 0 {
		return
	}
	var got []string
	for _, k := range c.eventCalls() {
		p, _, _ := strings.Cut(k.path, "?")
		got = append(got, k.method+" "+nsInPath.ReplaceAllString(p, "/namespaces/NS"))
	}
	// The last two (the Event and the status) are written at once.
	want := slices.Clone(firstEventCalls)
	if n := len(want); len(got) == n {
		slices.Sort(got[n-2:])
		slices.Sort(want[n-2:])
	}
	if !slices.Equal(got, want) {
		t.Errorf("run %d: the first event's API calls:\n  %s\nwant\n  %s", run, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// discoveryPaths is a group-version's discovery: /api/v1, /apis/<g>/<v>.
var discoveryPaths = regexp.MustCompile(`^/api/v1$|^/apis/[^/]+/[^/]+$`)
