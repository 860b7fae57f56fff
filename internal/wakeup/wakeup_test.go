package wakeup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/testenv"
)

var (
	scheme  = runtime.NewScheme()
	bins    string
	testop  string
	opzeroB string
)

func TestMain(m *testing.M) {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if bins, err = os.MkdirTemp("", "wakeup-test-"); err != nil {
		panic(err)
	}
	defer os.RemoveAll(bins)
	testop, opzeroB = filepath.Join(bins, "testop"), filepath.Join(bins, "opzero")
	for out, pkg := range map[string]string{testop: "../testop", opzeroB: "../../cmd/opzero"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, b)
			return 1
		}
	}
	return testenv.Main(m, testenv.Options{Scheme: scheme, NoControllerManager: true,
		CRDDirs: []string{"../../config/crd", "../../examples/configwatcher/config/crd"}})
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// startOp runs the scripted operator serverless on port with durable time.
func startOp(t *testing.T, env *testenv.Env, port int) *exec.Cmd {
	t.Helper()
	sink := fmt.Sprintf("http://127.0.0.1:%d", port)
	cmd := exec.Command(testop, "--mode=serverless", "--insecure-no-auth", "--wakeup-sink="+sink, "--backoff-base=1s", "--backoff-cap=10s")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PORT="+strconv.Itoa(port))
	logf, _ := os.Create(filepath.Join(t.TempDir(), "op.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("operator log:\n%s", b)
		}
	})
	eventually(t, 20*time.Second, "operator up", func(context.Context) (bool, error) {
		resp, err := http.Get(sink + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil, nil
	})
	return cmd
}

func runSource(t *testing.T, env *testenv.Env, ns string) {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wakeup.NewSource(c, wakeup.SourceOptions{Namespace: ns}).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func newCW(t *testing.T, env *testenv.Env, ns, name, script string) *v1.ConfigWatcher {
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ConfigWatcherSpec{ConfigMap: script, PodSelector: map[string]string{"a": "b"}}}
	if err := env.Client.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	return cw
}

// send delivers the event an ApiServerSource would send for cw.
func send(t *testing.T, port int, cw *v1.ConfigWatcher) *http.Response {
	t.Helper()
	obj := cw.DeepCopy()
	gvk, _ := apiutil.GVKForObject(obj, scheme)
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	b, _ := json.Marshal(obj)
	ev, err := cloudevent.NewObjectEvent(cloudevent.Reference, cloudevent.Update, b, "configwatchers")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := cloudevent.NewRequest(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/", port), ev, false)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// reconciles reads the scripted operator's reconcile log.
func reconciles(t *testing.T, env *testenv.Env, key types.NamespacedName) []time.Time {
	cw := &v1.ConfigWatcher{}
	if err := env.Client.Get(context.Background(), key, cw); err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, f := range strings.Split(strings.TrimSuffix(cw.Status.ConfigMapVersion, ","), ",") {
		if ms, err := strconv.ParseInt(f, 10, 64); err == nil {
			out = append(out, time.UnixMilli(ms))
		}
	}
	return out
}

func record(env *testenv.Env, key types.NamespacedName) (*v1alpha1.Wakeup, error) {
	w := &v1alpha1.Wakeup{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: key.Namespace, Name: wakeup.Name("testop", key)}, w)
	return w, err
}

// TestRequeueAfterSurvivesKill: RequeueAfter 3 s, the operator is killed,
// a fresh one is started; the wakeup source delivers and the fresh one
// reconciles within due + 1 s.
func TestRequeueAfterSurvivesKill(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	port := freePort(t)
	a := startOp(t, env, port)
	cw := newCW(t, env, ns, "rq", "requeue-3s")
	key := client.ObjectKeyFromObject(cw)
	if resp := send(t, port, cw); resp.StatusCode != 200 {
		t.Fatalf("first event: %s", resp.Status)
	}
	w, err := record(env, key)
	if err != nil || w.Spec.Reason != v1alpha1.ReasonRequeueAfter {
		t.Fatalf("no RequeueAfter record after the answer: %v %+v", err, w.Spec)
	}
	due := w.Spec.Due.Time
	_ = a.Process.Signal(syscall.SIGKILL)
	_, _ = a.Process.Wait()
	startOp(t, env, port)
	runSource(t, env, ns)
	eventually(t, 15*time.Second, "the second reconcile", func(context.Context) (bool, error) {
		return len(reconciles(t, env, key)) == 2, nil
	})
	at := reconciles(t, env, key)[1]
	if at.Before(due.Add(-time.Millisecond)) || at.After(due.Add(time.Second)) {
		t.Fatalf("reconciled at %s, due %s: want within [due, due+1s] (late by %s)", at.Format(time.StampMilli), due.Format(time.StampMilli), at.Sub(due))
	}
	t.Logf("due %s, reconciled by a fresh process %s after due", due.Format(time.StampMilli), at.Sub(due))
	eventually(t, 5*time.Second, "the record deleted after delivery", func(context.Context) (bool, error) {
		_, err := record(env, key)
		return apierrors.IsNotFound(err), nil
	})
}

// TestRetriesFollowThePolicy: fails 3 times then succeeds; the reconciles
// are 1 s, 2 s, 4 s apart (base 1 s), and no record remains.
func TestRetriesFollowThePolicy(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	port := freePort(t)
	startOp(t, env, port)
	runSource(t, env, ns)
	cw := newCW(t, env, ns, "f3", "fail-3")
	key := client.ObjectKeyFromObject(cw)
	if resp := send(t, port, cw); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Opzero-Result"), "reconcile failed, retry recorded") {
		t.Fatalf("failed reconcile answered %s %q, want 200 once the retry is recorded", resp.Status, resp.Header.Get("Opzero-Result"))
	}
	eventually(t, 20*time.Second, "3 failures and a success", func(context.Context) (bool, error) {
		return len(reconciles(t, env, key)) == 4, nil
	})
	log := reconciles(t, env, key)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		got := log[i+1].Sub(log[i])
		if got < want-10*time.Millisecond || got > want+time.Second {
			t.Errorf("retry %d came %s after the failure, want %s (+ <1s delivery)", i+1, got, want)
		}
	}
	eventually(t, 5*time.Second, "no record after the success", func(context.Context) (bool, error) {
		_, err := record(env, key)
		return apierrors.IsNotFound(err), nil
	})
}

// TestSuccessCancelsPendingRetry: a success caused by another event during
// the backoff deletes the pending retry: no extra reconcile.
func TestSuccessCancelsPendingRetry(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	port := freePort(t)
	startOp(t, env, port)
	runSource(t, env, ns)
	cw := newCW(t, env, ns, "f1", "fail-1")
	key := client.ObjectKeyFromObject(cw)
	send(t, port, cw)
	if _, err := record(env, key); err != nil {
		t.Fatalf("no retry recorded: %v", err)
	}
	if resp := send(t, port, cw); resp.StatusCode != 200 {
		t.Fatalf("second event: %s", resp.Status)
	}
	if _, err := record(env, key); !apierrors.IsNotFound(err) {
		t.Fatalf("the success left the retry pending: %v", err)
	}
	time.Sleep(3 * time.Second) // well past the 1 s retry
	if n := len(reconciles(t, env, key)); n != 2 {
		t.Fatalf("%d reconciles, want 2 (no retry after the success)", n)
	}
}
