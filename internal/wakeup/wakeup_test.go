package wakeup_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/testkit"
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
	flag.Parse()
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
	if testing.Short() { // every test needs the control plane: testenv.Get skips them
		return testenv.Main(m, testenv.Options{})
	}
	for out, pkg := range map[string]string{testop: "../testop", opzeroB: "../../cmd/opzero"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, b)
			return 1
		}
	}
	return testenv.Main(m, testenv.Options{Scheme: scheme, NoControllerManager: true,
		CRDDirs: []string{"../../config/crd", "../../examples/configwatcher/config/crd"}})
}

// startOp runs the scripted operator serverless with durable time on a free
// port (another if the port was taken meanwhile).
func startOp(t *testing.T, env *testenv.Env) (*testkit.Child, int) {
	t.Helper()
	var op *testkit.Child
	port := testkit.OnFreePort(t, func(port int) (err error) {
		op, err = tryOp(t, env, port)
		return err
	})
	return op, port
}

// restartOp runs the scripted operator again on port: the records already
// written name it.
func restartOp(t *testing.T, env *testenv.Env, port int) *testkit.Child {
	t.Helper()
	op, err := tryOp(t, env, port)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func tryOp(t *testing.T, env *testenv.Env, port int) (*testkit.Child, error) {
	sink := fmt.Sprintf("http://127.0.0.1:%d", port)
	cmd := exec.Command(testop, "--mode=serverless", "--insecure-no-auth", "--wakeup-sink="+sink, "--backoff-base=1s", "--backoff-cap=10s")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PORT="+strconv.Itoa(port))
	return testkit.StartChild(t, cmd, sink+"/healthz", 20*time.Second)
}

// runSource runs a wakeup source for ns until t ends. It delivers one
// record at a time (Concurrency 1), in due order, which fence relies on.
func runSource(t *testing.T, env *testenv.Env, ns string, o wakeup.SourceOptions) {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	o.Namespace, o.Concurrency = ns, 1
	testkit.Background(t, wakeup.NewSource(c, o).Run)
}

// fence creates a Wakeup of operator op due at due, with its own sink, and
// waits until the source has delivered it. The source delivers one record
// at a time in due order, and learns of records (and of their deletion) in
// the order they were written: once the fence is delivered (and deleted), any record
// written before it and due before it has been delivered too, unless it
// was deleted. That is the signal a test waits for instead of sleeping
// "long enough" before it asserts that something did not happen.
func fence(t *testing.T, env *testenv.Env, ns, op string, due time.Time) {
	t.Helper()
	hit := make(chan struct{}, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		select {
		case hit <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(sink.Close)
	w := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "fence-", Labels: map[string]string{wakeup.OperatorLabel: op}},
		Spec: v1alpha1.WakeupSpec{Operator: op, Sink: sink.URL, Due: metav1.NewMicroTime(due), Reason: v1alpha1.ReasonRequeueAfter,
			Target: v1alpha1.Target{APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher", Namespace: ns, Name: "fence"}}}
	if err := env.Client.Create(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hit:
	case <-time.After(time.Until(due) + 30*time.Second):
		t.Fatalf("the fence Wakeup due %s was not delivered", due.Format(time.StampMilli))
	}
	testkit.Eventually(t, 10*time.Second, "the fence deleted after its delivery", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), w)
		return apierrors.IsNotFound(err), nil
	})
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
	return sendAction(t, port, cw, cloudevent.Update)
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
	a, port := startOp(t, env)
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
	a.Kill()
	restartOp(t, env, port)
	runSource(t, env, ns, wakeup.SourceOptions{})
	testkit.Eventually(t, 15*time.Second, "the second reconcile", func(context.Context) (bool, error) {
		return len(reconciles(t, env, key)) == 2, nil
	})
	at := reconciles(t, env, key)[1]
	if at.Before(due.Add(-time.Millisecond)) || at.After(due.Add(time.Second)) {
		t.Fatalf("reconciled at %s, due %s: want within [due, due+1s] (late by %s)", at.Format(time.StampMilli), due.Format(time.StampMilli), at.Sub(due))
	}
	t.Logf("due %s, reconciled by a fresh process %s after due", due.Format(time.StampMilli), at.Sub(due))
	testkit.Eventually(t, 5*time.Second, "the record deleted after delivery", func(context.Context) (bool, error) {
		_, err := record(env, key)
		return apierrors.IsNotFound(err), nil
	})
}

// TestRetriesFollowThePolicy: fails 3 times then succeeds; the reconciles
// are 1 s, 2 s, 4 s apart (base 1 s), and no record remains.
func TestRetriesFollowThePolicy(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	_, port := startOp(t, env)
	runSource(t, env, ns, wakeup.SourceOptions{})
	cw := newCW(t, env, ns, "f3", "fail-3")
	key := client.ObjectKeyFromObject(cw)
	if resp := send(t, port, cw); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Opzero-Result"), "reconcile failed, retry recorded") {
		t.Fatalf("failed reconcile answered %s %q, want 200 once the retry is recorded", resp.Status, resp.Header.Get("Opzero-Result"))
	}
	testkit.Eventually(t, 20*time.Second, "3 failures and a success", func(context.Context) (bool, error) {
		return len(reconciles(t, env, key)) == 4, nil
	})
	log := reconciles(t, env, key)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		got := log[i+1].Sub(log[i])
		if got < want-10*time.Millisecond || got > want+time.Second {
			t.Errorf("retry %d came %s after the failure, want %s (+ <1s delivery)", i+1, got, want)
		}
	}
	testkit.Eventually(t, 5*time.Second, "no record after the success", func(context.Context) (bool, error) {
		_, err := record(env, key)
		return apierrors.IsNotFound(err), nil
	})
}

// TestSuccessCancelsPendingRetry: a success caused by another event during
// the backoff deletes the pending retry: no extra reconcile.
func TestSuccessCancelsPendingRetry(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	_, port := startOp(t, env)
	runSource(t, env, ns, wakeup.SourceOptions{})
	cw := newCW(t, env, ns, "f1", "fail-1")
	key := client.ObjectKeyFromObject(cw)
	send(t, port, cw)
	retry, err := record(env, key)
	if err != nil {
		t.Fatalf("no retry recorded: %v", err)
	}
	if resp := send(t, port, cw); resp.StatusCode != 200 {
		t.Fatalf("second event: %s", resp.Status)
	}
	if _, err := record(env, key); !apierrors.IsNotFound(err) {
		t.Fatalf("the success left the retry pending: %v", err)
	}
	fence(t, env, ns, "testop", retry.Spec.Due.Add(time.Millisecond)) // the retry would have been delivered by now
	if n := len(reconciles(t, env, key)); n != 2 {
		t.Fatalf("%d reconciles, want 2 (no retry after the success)", n)
	}
}

// sendAction delivers an event of action for cw, in Reference mode (no
// object in it: the reconcile reads the API server).
func sendAction(t *testing.T, port int, cw *v1.ConfigWatcher, action cloudevent.Action) *http.Response {
	t.Helper()
	obj := cw.DeepCopy()
	gvk, _ := apiutil.GVKForObject(obj, scheme)
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	b, _ := json.Marshal(obj)
	ev, err := cloudevent.NewObjectEvent(cloudevent.Reference, action, b, "configwatchers")
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

// TestWakeupsEndWithTheirObject: an object whose reconcile asked for a
// RequeueAfter an hour away is deleted; the reconcile of its delete finds
// it gone and its Wakeup goes with it (no cold start for it later, no
// record left). A reconcile whose status write finds its object deleted
// meanwhile is settled, not retried: no retry recorded.
func TestWakeupsEndWithTheirObject(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	_, port := startOp(t, env)

	cw := newCW(t, env, ns, "hourly", "requeue-1h")
	key := client.ObjectKeyFromObject(cw)
	if resp := sendAction(t, port, cw, cloudevent.Add); resp.StatusCode != 200 {
		t.Fatalf("create event: %s", resp.Status)
	}
	if w, err := record(env, key); err != nil || w.Spec.Reason != v1alpha1.ReasonRequeueAfter {
		t.Fatalf("no RequeueAfter record after the first reconcile: %v", err)
	}
	if err := env.Client.Delete(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	if resp := sendAction(t, port, cw, cloudevent.Delete); resp.StatusCode != 200 {
		t.Fatalf("delete event: %s (%s)", resp.Status, resp.Header.Get("Opzero-Result"))
	}
	if w, err := record(env, key); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted object's Wakeup is still there (%v, due %v): it would wake the operator for nothing", err, w.Spec.Due)
	}

	gone := newCW(t, env, ns, "gone", "delete-self")
	gkey := client.ObjectKeyFromObject(gone)
	resp := sendAction(t, port, gone, cloudevent.Add)
	if resp.StatusCode != 200 || strings.Contains(resp.Header.Get("Opzero-Result"), "retry") {
		t.Fatalf("a reconcile whose status write found its object deleted: %s %q, want 200, settled", resp.Status, resp.Header.Get("Opzero-Result"))
	}
	if _, err := record(env, gkey); !apierrors.IsNotFound(err) {
		t.Fatalf("a retry was recorded for an object that is gone: %v", err)
	}
}
