package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
)

// operatorsEnv turns on TestKnativeOperators (make e2e-knative): the
// generated manifests of the examples on real Knative.
const operatorsEnv = "OPZERO_E2E_KNATIVE_OPERATORS"

var (
	gvrKsvc          = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	gvrAPIServerSrc  = schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "apiserversources"}
	gvrPingSource    = schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "pingsources"}
	gvrConfigWatcher = schema.GroupVersionResource{Group: "k8spatterns.io", Version: "v1", Resource: "configwatchers"}
	gvrSubscription  = schema.GroupVersionResource{Group: "opzero.dev", Version: "v1alpha1", Resource: "subscriptions"}
)

// A wiring is how `opzero manifests` connects a serverless operator to its
// events: the opzero hub (the default: a Subscription, served by the
// cluster's one opzero-system/opzero-hub) or Knative's sources
// (--source=knative: ApiServerSources, PingSources, a wakeup source).
type wiring struct {
	name  string
	flags []string // for `opzero manifests`: none for the default
}

var (
	hubWiring     = wiring{name: "hub (the default)"}
	knativeWiring = wiring{name: "knative (--source=knative)", flags: []string{"--source=" + manifests.SourceKnative}}
)

func (w wiring) hub() bool { return len(w.flags) == 0 }

// hubSender is the identity of the hub's deliveries, the one
// --allowed-senders the hub wiring writes.
var hubSender = "system:serviceaccount:" + manifests.HubNamespace + ":" + manifests.HubName

// e2e is one run of TestKnativeOperators: the cluster, its clients, the
// repository and an opzero binary built from it.
type e2e struct {
	c      *Cluster
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	root   string
	opzero string
	run    string // suffix of this run's namespaces
	// figures are the FIGURE lines of the subtests, logged again side by
	// side when they are done.
	figures []string
}

// knativeCluster is the cluster recorded in $OPZERO_E2E_CLUSTER_DIR (or
// DefaultDir) when one runs there with Knative, left running; otherwise a
// new one with Knative, taken down when the test ends.
func knativeCluster(t *testing.T) *Cluster {
	dir := os.Getenv("OPZERO_E2E_CLUSTER_DIR")
	if dir == "" {
		dir = DefaultDir
	}
	if c, err := Load(dir); err == nil && c.Config != nil && c.Images["knative-serving-queue"] != "" {
		t.Logf("using the cluster running in %s", dir)
		return c
	}
	if err := Check(); errors.Is(err, ErrUnsupported) {
		t.Skipf("this machine cannot run the cluster: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "cluster")
	t0 := time.Now()
	c, err := Up(context.Background(), Options{Dir: dir, Progress: testkit.LogWriter(t), Knative: true, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up with Knative in %s", time.Since(t0).Round(time.Second))
	t.Cleanup(func() {
		if err := Down(dir, testkit.LogWriter(t)); err != nil {
			t.Error(err)
		}
	})
	return c
}

// TestKnativeOperators applies what `opzero manifests` generates for the
// examples, unchanged but for the ko:// images (built here and loaded into
// the node, as `ko apply` would push them), and checks them on real
// Knative Serving and Eventing.
func TestKnativeOperators(t *testing.T) {
	if os.Getenv(operatorsEnv) == "" {
		t.Skipf("set %s=1 (make e2e-knative) to run the examples on a real cluster with Knative; it needs root", operatorsEnv)
	}
	e := &e2e{run: strconv.FormatInt(time.Now().Unix()%(36*36*36*36), 36)}
	// The test's clients are not rate limited: with client-go's default (5
	// requests/s, burst 10), the 20 ms polls of waitZero emptied the bucket,
	// so a cold start's ConfigMap edit (timed from before the call) waited
	// up to 200 ms for a token and its status was seen up to 200 ms late,
	// against a trivial service timed by a plain HTTP request.
	c := *knativeCluster(t)
	c.Config = rest.CopyConfig(c.Config)
	c.Config.QPS, c.Config.Burst = 1000, 2000
	e.c = &c
	var err error
	if e.cs, err = kubernetes.NewForConfig(e.c.Config); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(e.c.Config); err != nil {
		t.Fatal(err)
	}
	if e.root, err = controlplane.RepoRoot(); err != nil {
		t.Fatal(err)
	}
	e.opzero = filepath.Join(t.TempDir(), "opzero")
	if out, err := e.command("go", "build", "-o", e.opzero, "./cmd/opzero").CombinedOutput(); err != nil {
		t.Fatalf("building opzero: %v\n%s", err, out)
	}
	t.Logf("kubectl get pods -A:\n%s", kubectl(t, e.c, "get", "pods", "-A", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,STATUS:.status.phase,IMAGE:.spec.containers[0].image"))
	t.Run("configwatcher", func(t *testing.T) { e.configWatcher(t, hubWiring, "e2e-configwatcher") })
	t.Run("configwatcher-knative", func(t *testing.T) { e.configWatcher(t, knativeWiring, "e2e-configwatcher-knative") })
	t.Run("kubebuilder", e.kubebuilder)
	t.Run("webhooks", e.webhooks)
	t.Run("kubebuilder-multigroup", e.multigroup)
	t.Run("scale-out", e.scaleOut)
	t.Run("bundles", e.bundles)
	t.Run("metacontroller", e.metacontroller)
	t.Run("unchanged", e.unchanged)
	t.Run("unchanged-webhooks", e.unchangedWebhooks)
	t.Run("unchanged-classic", e.unchangedClassic)
	t.Run("unchanged-node", e.unchangedNode)
	t.Run("fleet", e.fleet)
	if len(e.figures) > 0 {
		t.Logf("FIGURES of this run, side by side:\n    %s", strings.Join(e.figures, "\n    "))
	}
}

// figure logs a measured figure and keeps it for the run's summary.
func (e *e2e) figure(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Logf("FIGURE %s", line)
	e.figures = append(e.figures, line)
}

// wired waits until what the wiring w delivers the operator's events with
// is ready in ns and says what that was: for the hub, the hub's Deployment
// rolled out and available and the operator's one Subscription Ready (the
// hub checked its kinds, the sink and the service account's RBAC); for
// Knative's sources, apiServerSources ApiServerSources and the 2 sweep
// PingSources Ready, and the operator's wakeup source (svc-wakeup-source)
// available.
func (e *e2e) wired(t *testing.T, w wiring, ns, svc string, apiServerSources int) string {
	t.Helper()
	if w.hub() {
		e.hubRolledOut(t)
		e.ready(t, ns, gvrSubscription, 1)
		return "the hub available and the Subscription Ready"
	}
	e.ready(t, ns, gvrAPIServerSrc, apiServerSources)
	e.ready(t, ns, gvrPingSource, 2)
	e.waitAvailable(t, ns, svc+"-wakeup-source")
	return fmt.Sprintf("%d ApiServerSources, 2 PingSources Ready and the wakeup source available", apiServerSources)
}

// hubRolledOut waits until the hub's Deployment (opzero-system/opzero-hub,
// which every operator's manifests apply: a hub image built in another
// module is another image) has rolled out: every replica updated and
// available, no old one left.
func (e *e2e) hubRolledOut(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 3*time.Minute, "the hub rolled out and available", func(ctx context.Context) (bool, error) {
		d, err := e.cs.AppsV1().Deployments(manifests.HubNamespace).Get(ctx, manifests.HubName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := d.Status
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		ok := s.ObservedGeneration == d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
		return ok, fmt.Errorf("generation %d observed %d: %d replicas, %d updated, %d available, want %d", d.Generation, s.ObservedGeneration,
			s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want)
	})
}

func (e *e2e) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = e.root
	return cmd
}

// deploy writes the operator's manifests with `opzero manifests` (the
// flags given), resolves their ko:// images into the node and applies
// them; it returns the manifests' folder.
func (e *e2e) deploy(t *testing.T, ns string, flags ...string) string {
	t.Helper()
	return e.deployIn(t, e.root, ns, flags...)
}

// deployIn is deploy run in the module dir (`opzero manifests` and the
// images' go build), as a user runs it in the folder of their project.
func (e *e2e) deployIn(t *testing.T, dir, ns string, flags ...string) string {
	t.Helper()
	module := dir
	dir = filepath.Join(t.TempDir(), "manifests")
	args := append([]string{"manifests", "--namespace", ns, "-o", dir}, flags...)
	cmd := e.command(e.opzero, args...)
	cmd.Dir = module
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opzero %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("$ opzero %s", strings.Join(args, " "))
	manifest, err := ReadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	resolved, refs, err := e.c.ResolveKo(context.Background(), module, manifest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ko:// images built and loaded into the node in %s: %v", time.Since(t0).Round(time.Millisecond), refs)
	if out, err := e.c.Apply(context.Background(), resolved); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("applied:\n%s", out)
	}
	return dir
}

// namespace creates a namespace named base plus this run's suffix (a
// namespace of an earlier run may still be terminating: Knative's
// finalizers and the namespace controller's backoff can take minutes) and
// returns its name; it is deleted when the test ends.
func (e *e2e) namespace(t *testing.T, base string) string {
	t.Helper()
	ns := base + "-" + e.run
	if _, err := e.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubectl get all,ksvc,apiserversources,pingsources,wakeups,subscriptions -n %s:\n%s", ns,
				kubectl(t, e.c, "get", "all,ksvc,apiserversources,pingsources,wakeups,subscriptions.opzero.dev", "-n", ns))
			t.Logf("events:\n%s", kubectl(t, e.c, "get", "events", "-n", ns, "--sort-by=.lastTimestamp"))
			t.Logf("subscriptions:\n%s", kubectl(t, e.c, "get", "subscriptions.opzero.dev", "-n", ns, "-o", "yaml"))
			t.Logf("the hub's log (its last 200 lines):\n%s", kubectl(t, e.c, "logs", "-n", manifests.HubNamespace, "deploy/"+manifests.HubName, "--tail=200"))
		}
		if os.Getenv("OPZERO_E2E_KEEP") == "" {
			_ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
			// Until it is gone: a namespace's removal makes Eventing roll out
			// every cluster-wide ApiServerSource's adapter again (its
			// Deployment lists the namespaces), and the new adapter does not
			// deliver what changed while it started; left to finish on its
			// own, it did so during the next subtest's cold starts and lost
			// one's ConfigMap edit.
			err := testkit.Poll(context.Background(), 5*time.Minute, func(ctx context.Context) (bool, error) {
				_, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				return apierrors.IsNotFound(err), err
			})
			if err != nil {
				t.Logf("namespace %s still there after its deletion: %v", ns, err)
			}
		}
	})
	return ns
}

// ready waits until every object of gvr in ns has condition Ready True.
func (e *e2e) ready(t *testing.T, ns string, gvr schema.GroupVersionResource, want int) {
	t.Helper()
	testkit.Eventually(t, 4*time.Minute, fmt.Sprintf("%d %s Ready in %s", want, gvr.Resource, ns), func(ctx context.Context) (bool, error) {
		l, err := e.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var notReady []string
		for _, o := range l.Items {
			if s, reason := condition(&o, "Ready"); s != "True" {
				notReady = append(notReady, fmt.Sprintf("%s: %s %s", o.GetName(), s, reason))
			}
		}
		if len(l.Items) != want || len(notReady) > 0 {
			return false, fmt.Errorf("%d of %d; not Ready: %s", len(l.Items), want, strings.Join(notReady, "; "))
		}
		return true, nil
	})
}

// condition returns the status and the reason+message of o's condition typ.
func condition(o *unstructured.Unstructured, typ string) (string, string) {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"], " ", m["message"])
		}
	}
	return "Unknown", "no condition " + typ
}

// servicePods returns the names of the running (not terminating) pods of
// Knative Service svc.
func (e *e2e) servicePods(ctx context.Context, ns, svc string) ([]corev1.Pod, error) {
	l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + svc})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// waitZero waits until svc has no pod left but terminating ones and
// returns how long that took.
func (e *e2e) waitZero(t *testing.T, ns, svc string) time.Duration {
	t.Helper()
	t0 := time.Now()
	testkit.Eventually(t, 5*time.Minute, svc+" at zero pods", func(ctx context.Context) (bool, error) {
		pods, err := e.servicePods(ctx, ns, svc)
		return err == nil && len(pods) == 0, fmt.Errorf("%v: %d pods", err, len(pods))
	})
	return time.Since(t0)
}

// podUIDs is every pod of Knative Service svc, terminating ones too.
func (e *e2e) podUIDs(t *testing.T, ns, svc string) map[types.UID]bool {
	t.Helper()
	l, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]bool{}
	for _, p := range l.Items {
		out[p.UID] = true
	}
	return out
}

// newPod says whether svc has a pod now that was not in before: at "zero
// pods" (none that is not terminating), a pod still draining (queue-proxy
// serves until its drain ends, and the user container's preStop waits for
// it) can take a request the activator or the ingress still routes to it,
// and then what was timed was not a cold start.
func (e *e2e) newPod(t *testing.T, ns, svc string, before map[types.UID]bool) bool {
	for uid := range e.podUIDs(t, ns, svc) {
		if !before[uid] {
			return true
		}
	}
	return false
}

// podNames returns the sorted names of ns's pods matching sel that are not
// terminating.
func (e *e2e) podNames(ctx context.Context, ns, sel string) ([]string, error) {
	l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

func durations(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var parts []string
	for _, d := range ds {
		parts = append(parts, d.Round(time.Millisecond).String())
	}
	return fmt.Sprintf("median %s, max %s (n=%d: %s)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s), strings.Join(parts, " "))
}
