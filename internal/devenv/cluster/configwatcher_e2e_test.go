package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/cloudevent"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/wakeup"
)

// The demo's application (examples/configwatcher/config/samples/webapp.yaml)
// with the cluster's netcheck image: the sample's k8spatterns/mini-http-server
// would be pulled, and nothing is.
const webapp = `apiVersion: v1
kind: ConfigMap
metadata: {name: webapp-config, namespace: %[1]s}
data: {message: "Hello, World"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: webapp, namespace: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: webapp}}
  template:
    metadata: {labels: {app: webapp}}
    spec:
      containers:
      - name: webapp
        image: %[2]s
        args: [serve, ":8080"]
        env:
        - name: MESSAGE
          valueFrom: {configMapKeyRef: {name: webapp-config, key: message}}
`

// configWatcher is the demo's steps (hack/demo) on real Knative, with the
// operator wired by w, in a namespace of its own (base): the ConfigWatcher
// created at zero pods starts the operator; a ConfigMap edit restarts the
// pods it selects; the operator's real pod scales to zero; a Wakeup due
// while at zero is delivered (by the hub, or the operator's wakeup
// source), which wakes it; the senders' OIDC tokens are accepted and
// others refused; cold starts measured. The always-on memory comparison
// runs with the Knative wiring (its adapters are in the operator's
// namespace).
func (e *e2e) configWatcher(t *testing.T, w wiring, base string) {
	const svc = "configwatcher"
	ctx := context.Background()
	ns := e.namespace(t, base)
	if _, err := e.c.Apply(ctx, fmt.Sprintf(webapp, ns, e.c.Images["netcheck"])); err != nil {
		t.Fatal(err)
	}
	var before []string
	testkit.Eventually(t, 2*time.Minute, "2 webapp pods Running", func(ctx context.Context) (bool, error) {
		var err error
		before, err = e.podNames(ctx, ns, "app=webapp")
		return err == nil && len(before) == 2, fmt.Errorf("%v: %v", err, before)
	})

	e.deploy(t, ns, append([]string{"--operator", "./examples/configwatcher", "--idle", "6s"}, w.flags...)...)
	t0 := time.Now()
	e.ready(t, ns, gvrKsvc, 1)
	wired := e.wired(t, w, ns, svc, 2) // ConfigWatcher (Resource) and ConfigMap (Reference)
	t.Logf("wiring %s: Knative Service Ready, %s %s after apply", w.name, wired, time.Since(t0).Round(time.Millisecond))
	t.Logf("the revision's first pod gone %s later", e.waitZero(t, ns, svc).Round(time.Second))

	// Create: the first event starts the operator.
	t0 = time.Now()
	if _, err := e.c.Apply(ctx, "apiVersion: k8spatterns.io/v1\nkind: ConfigWatcher\nmetadata: {name: webapp-config-watcher, namespace: "+ns+
		"}\nspec: {configMap: webapp-config, podSelector: {app: webapp}}\n"); err != nil {
		t.Fatal(err)
	}
	cw := e.configWatcherStatus(t, ns, func(s map[string]any) bool { return s["configMapVersion"] != nil })
	t.Logf("ConfigWatcher created at zero pods: reconciled %s later (status %v)", time.Since(t0).Round(time.Millisecond), cw)
	t.Logf("scaled to zero %s after the reconcile", e.waitZero(t, ns, svc).Round(time.Second))

	// Edit the ConfigMap: the operator restarts the selected pods.
	t0 = time.Now()
	rv := e.editConfigMap(t, ns, "Hello, opzero")
	e.configWatcherStatus(t, ns, func(s map[string]any) bool { return s["configMapVersion"] == rv })
	reconciled := time.Since(t0)
	testkit.Eventually(t, 2*time.Minute, "the webapp pods replaced", func(ctx context.Context) (bool, error) {
		after, err := e.podNames(ctx, ns, "app=webapp")
		if err != nil || len(after) != 2 {
			return false, fmt.Errorf("%v: %v", err, after)
		}
		for _, p := range after {
			if slices.Contains(before, p) {
				return false, fmt.Errorf("%s still runs: %v", p, after)
			}
		}
		t.Logf("pods restarted %s after the edit: %v -> %v", time.Since(t0).Round(time.Millisecond), before, after)
		return true, nil
	})
	t.Logf("ConfigMap edited at zero pods: reconciled %s later", reconciled.Round(time.Millisecond))
	t.Logf("scaled to zero %s after the reconcile", e.waitZero(t, ns, svc).Round(time.Second))

	t.Run("a Wakeup due at zero pods wakes the operator", func(t *testing.T) { e.wakeupAtZero(t, w, ns, svc) })
	t.Run("OIDC: the senders' audience and accounts only", func(t *testing.T) { e.oidc(t, w, ns, svc) })
	t.Run("cold start figures", func(t *testing.T) {
		n := 10
		if v := os.Getenv("OPZERO_E2E_COLD_STARTS"); v != "" {
			n, _ = strconv.Atoi(v)
		}
		if n <= 0 {
			t.Skipf("OPZERO_E2E_COLD_STARTS=%d", n)
		}
		e.coldStarts(t, w, ns, svc, n)
	})
	if !w.hub() {
		t.Run("always-on memory at 10k ConfigMaps", func(t *testing.T) { e.alwaysOn(t, ns, svc) })
	}
}

// configWatcherStatus waits until the ConfigWatcher's status satisfies ok
// and returns it.
func (e *e2e) configWatcherStatus(t *testing.T, ns string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var status map[string]any
	testkit.Eventually(t, 3*time.Minute, "the ConfigWatcher's status", func(ctx context.Context) (bool, error) {
		o, err := e.dyn.Resource(gvrConfigWatcher).Namespace(ns).Get(ctx, "webapp-config-watcher", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status, _, _ = unstructured.NestedMap(o.Object, "status")
		return ok(status), fmt.Errorf("status %v", status)
	})
	return status
}

// editConfigMap sets webapp-config's message and returns its new
// resourceVersion.
func (e *e2e) editConfigMap(t *testing.T, ns, message string) string {
	t.Helper()
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), "webapp-config", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"data":{"message":%q}}`, message)), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

// wakeupAtZero records a Wakeup for the ConfigWatcher, as the operator's
// engine does for a RequeueAfter (the same Store), due while the operator
// is at zero pods: the wiring's wakeup delivery (the hub's, for a
// Subscription with wakeups: true; else the operator's wakeup source) must
// deliver it through Knative (the activator starts a pod), not before it
// is due, and delete it.
func (e *e2e) wakeupAtZero(t *testing.T, w wiring, ns, svc string) {
	ctx := context.Background()
	ctrllog.SetLogger(logr.Discard())
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	store := wakeup.NewStore(c, wakeup.StoreOptions{Operator: svc, Namespace: ns,
		Target: schema.GroupVersionKind{Group: "k8spatterns.io", Version: "v1", Kind: "ConfigWatcher"},
		Sink:   fmt.Sprintf("http://%s.%s.svc.cluster.local", svc, ns)})
	key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "webapp-config-watcher"}}
	if w.hub() { // the hub is the one to deliver it: there is no other
		if _, err := e.cs.AppsV1().Deployments(ns).Get(ctx, svc+"-wakeup-source", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the hub wiring has a Deployment %s-wakeup-source in %s (%v)", svc, ns, err)
		}
	}
	const after = 15 * time.Second
	due := time.Now().Add(after)
	if err := store.Requeue(ctx, key, after); err != nil {
		t.Fatal(err)
	}
	name := wakeup.Name(svc, key.NamespacedName)
	woke := e.wokeBy(t, ns, svc, "the Wakeup", due)
	testkit.Eventually(t, time.Minute, "the Wakeup delivered and deleted", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.Wakeup{})
		return client.IgnoreNotFound(err) == nil && err != nil, err
	})
	logs := e.operatorLogs(t, ns, svc)
	if !strings.Contains(logs, `"eventType":"`+cloudevent.WakeupType+`"`) {
		t.Errorf("the operator's log has no %s delivery:\n%s", cloudevent.WakeupType, logs)
	}
	t.Logf("wiring %s: Wakeup due %s after it was written, at zero pods: a pod started %s after the due time, the record deleted", w.name, after, woke.Sub(due).Round(time.Millisecond))
	t.Logf("scaled to zero %s after", e.waitZero(t, ns, svc).Round(time.Second))
}

// operatorLogs returns the operator container's log of every running pod
// of svc.
func (e *e2e) operatorLogs(t *testing.T, ns, svc string) string {
	t.Helper()
	return e.containerLogs(t, ns, svc, "operator")
}

// oidc sends a CloudEvent straight to a running operator pod's queue-proxy
// (the host reaches pod addresses), with tokens made by TokenRequest: a
// sender's service account of the wiring with the operator's audience is
// accepted (the hub's, opzero-system/opzero-hub, the only one the hub
// wiring allows; the wakeup source's with Knative's); the same account
// for another audience, accounts not among --allowed-senders (of the
// operator's namespace, and of the hub's namespace but not the hub's), and
// no token are refused.
func (e *e2e) oidc(t *testing.T, w wiring, ns, svc string) {
	ctx := context.Background()
	senders := e.allowedSenders(t, ns, svc)
	t.Logf("the Knative Service's --allowed-senders=%s", strings.Join(senders, ","))
	// accounts as [namespace, name]: the operator's own is no sender
	sender, others := [2]string{ns, svc + "-wakeup-source"}, [][2]string{{ns, "default"}, {ns, svc}}
	if w.hub() {
		if !slices.Equal(senders, []string{hubSender}) {
			t.Fatalf("the hub wiring's --allowed-senders=%s: want the hub's account alone, %s", strings.Join(senders, ","), hubSender)
		}
		sender = [2]string{manifests.HubNamespace, manifests.HubName}
		others = append(others, [2]string{manifests.HubNamespace, "default"})
	}
	if id := "system:serviceaccount:" + sender[0] + ":" + sender[1]; !slices.Contains(senders, id) {
		t.Fatalf("%s is not among --allowed-senders=%s", id, strings.Join(senders, ","))
	}
	// An event at zero pods starts one; it stays ~20 s (--idle 6s).
	e.editConfigMap(t, ns, "oidc")
	var ip string
	testkit.Eventually(t, 2*time.Minute, "a running operator pod", func(ctx context.Context) (bool, error) {
		pods, err := e.servicePods(ctx, ns, svc)
		for _, p := range pods {
			if p.Status.PodIP != "" && p.Status.Phase == "Running" {
				ip = p.Status.PodIP
				return true, nil
			}
		}
		return false, err
	})
	audience := fmt.Sprintf("opzero:%s:%s", ns, svc)
	token := func(sa [2]string, aud string) string {
		tr, err := e.cs.CoreV1().ServiceAccounts(sa[0]).CreateToken(ctx, sa[1], &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{aud}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	type request struct {
		name, token string
		refused     bool
	}
	requests := []request{
		{sender[0] + "/" + sender[1] + ", the operator's audience", token(sender, audience), false},
		{sender[0] + "/" + sender[1] + ", another audience", token(sender, "opzero:"+ns+":another"), true},
		{"no token", "", true},
	}
	for _, o := range others {
		requests = append(requests, request{o[0] + "/" + o[1] + ", the operator's audience, not among the allowed senders", token(o, audience), true})
	}
	for _, c := range requests {
		ev := cloudevent.NewWakeup(cloudevent.Wakeup{Source: "e2e", Operator: svc, APIVersion: "k8spatterns.io/v1", Kind: "ConfigWatcher",
			Namespace: ns, Name: "webapp-config-watcher", Reason: "RequeueAfter"})
		req, err := cloudevent.NewRequest(ctx, "http://"+ip+":8012/", ev, false)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		refused := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden
		if refused != c.refused || (!refused && resp.StatusCode >= 300) {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, bytes.TrimSpace(body))
		} else {
			t.Logf("%s: %d %s", c.name, resp.StatusCode, bytes.TrimSpace(body))
		}
	}
}

// coldStarts measures n cold starts: at zero pods, a ConfigMap edit until
// the ConfigWatcher's status records it (the event through the wiring w:
// the hub or the ApiServerSource adapter; the activator, a new pod, the
// reconcile), then the time until the revision is back at zero pods. Each
// is paired with the baseline in the same run: a trivial Knative Service
// beside it with the same scale annotations, timed from a request at zero
// pods to its first answer. The pods' steps are watched during each cold
// start of both, with the node's (the kubelet's and containerd's logs:
// admitted, sandbox, each container started, seen running, readiness
// passed) and the operator's own (listening, the event received and
// answered); the last one's timeline and each step's median are logged,
// the trivial service's beside them.
func (e *e2e) coldStarts(t *testing.T, w wiring, ns, svc string, n int) {
	tv := e.trivialBeside(t, ns, svc)
	hubStats := []string{"opzero_hub_events_sent_total", "opzero_hub_retries_total"}
	var before map[string]float64
	if w.hub() {
		before = e.hubCounters(t, hubStats...)
	}
	var cold, zero, base []time.Duration
	var steps, tsteps []*podSteps
	// A sample counts only if a pod started for it: at "zero pods" (none
	// that is not terminating) a pod still draining may take the request.
	for i := 0; len(cold) < n || len(base) < n; i++ {
		if i == 2*n {
			t.Fatalf("%d tries for %d cold starts of each (%d of the operator, %d of the trivial service): pods still draining served the rest", i, n, len(cold), len(base))
		}
		if d, ts := tv.firstAnswer(t); ts.has("pod object") {
			base, tsteps = append(base, d), append(tsteps, ts)
			e.waitZero(t, ns, svc)
			e.nodeSteps(ts)
		} else {
			t.Logf("the trivial service answered in %s from a pod still draining, not a cold start: not counted", d)
		}
		e.waitZero(t, ns, svc)
		ps := e.watchPodSteps(t, ns, svc)
		t0 := time.Now()
		rv := e.editConfigMap(t, ns, fmt.Sprintf("cold start %d", i))
		ps.add("ConfigMap edited")
		e.configWatcherStatus(t, ns, func(s map[string]any) bool { return s["configMapVersion"] == rv })
		d := time.Since(t0)
		ps.add("status written (seen)")
		e.operatorSteps(t, ns, ps)
		ps.stop()
		if !ps.has("pod object") {
			t.Logf("the operator reconciled in %s in a pod still draining, not a cold start: not counted", d)
			continue
		}
		cold = append(cold, d)
		e.nodeSteps(ps)
		steps = append(steps, ps)
		zero = append(zero, e.waitZero(t, ns, svc))
	}
	cold, base, tsteps, steps, zero = cold[:n], base[:n], tsteps[:n], steps[:n], zero[:n]
	e.figure(t, "real Knative, wiring %s: event at zero pods -> reconciled: %s", w.name, durations(cold))
	e.figure(t, "real Knative, same run: a trivial Knative Service (netcheck, same scale annotations): request at zero pods -> first answer: %s", durations(base))
	e.figure(t, "real Knative, wiring %s: cold start vs the trivial service's: median %.2fx, max %.2fx (goals <= 1.0x, <= 1.5x)", w.name,
		ratio(median(cold), median(base)), ratio(slices.Max(cold), slices.Max(base)))
	e.figure(t, "real Knative, wiring %s: the last cold start's steps, from the test's watch of the pod and the operator's log: %s", w.name, steps[len(steps)-1])
	e.figure(t, "real Knative, wiring %s: each step's median over the %d cold starts: %s", w.name, n, stepMedians(steps))
	e.figure(t, "real Knative, same run: the trivial service's steps, each one's median over %d: %s", n, stepMedians(tsteps))
	e.figure(t, "real Knative, wiring %s: reconciled -> zero pods (--idle 6s): %s", w.name, durations(zero))
	if w.hub() {
		after := e.hubCounters(t, hubStats...)
		e.figure(t, "real Knative, wiring %s: the hub during the %d cold starts: %v events sent, %v sends retried", w.name, n,
			after[hubStats[0]]-before[hubStats[0]], after[hubStats[1]]-before[hubStats[1]])
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// allowedSenders returns the --allowed-senders of Knative Service svc's
// operator container, as applied.
func (e *e2e) allowedSenders(t *testing.T, ns, svc string) []string {
	t.Helper()
	ksvc, err := e.dyn.Resource(gvrKsvc).Namespace(ns).Get(context.Background(), svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(ksvc.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		m, _ := c.(map[string]any)
		if m["name"] != "operator" {
			continue
		}
		args, _, _ := unstructured.NestedStringSlice(m, "args")
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--allowed-senders="); ok {
				return strings.Split(v, ",")
			}
		}
	}
	t.Fatalf("Knative Service %s/%s: no operator container with --allowed-senders", ns, svc)
	return nil
}
