package hub_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// operatorDeployment is an unchanged operator's Deployment: its image
// never runs here (no kubelet); kube-controller-manager makes its pods,
// and a test marks one ready (readyPod) as a kubelet would.
func operatorDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "example.com/unchanged-operator:v1"}}}}}}
}

func deploymentSub(ns, name, deployment string, res ...v1alpha1.SubscribedResource) *v1alpha1.Subscription {
	s := subscription(ns, name, "", res...)
	s.Spec.Sink = v1alpha1.Destination{Ref: &v1alpha1.KReference{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment}}
	return s
}

func replicas(t *testing.T, ns, name string) int32 {
	t.Helper()
	var d appsv1.Deployment
	must(t, testenv.Get(t).Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d))
	return ptr.Deref(d.Spec.Replicas, 1)
}

func waitReplicas(t *testing.T, ns, name string, want int32, why string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("Deployment %s at %d replicas (%s)", name, want, why), func(context.Context) (bool, error) {
		return replicas(t, ns, name) == want, nil
	})
}

// stays checks that the Deployment keeps n replicas for d.
func stays(t *testing.T, ns, name string, n int32, d time.Duration, why string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := replicas(t, ns, name); got != n {
			t.Fatalf("Deployment %s went to %d replicas, want %d kept (%s)", name, got, n, why)
		}
	}
}

func targetStatus(t *testing.T, ns, name string) v1alpha1.TargetStatus {
	t.Helper()
	var s v1alpha1.Subscription
	must(t, testenv.Get(t).Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &s))
	if s.Status.Target == nil {
		return v1alpha1.TargetStatus{}
	}
	return *s.Status.Target
}

func waitState(t *testing.T, ns, name, state string) v1alpha1.TargetStatus {
	t.Helper()
	var got v1alpha1.TargetStatus
	testkit.Eventually(t, 30*time.Second, "Subscription "+name+" in state "+state, func(context.Context) (bool, error) {
		got = targetStatus(t, ns, name)
		return got.State == state, nil
	})
	return got
}

// readyPod marks a pod of the Deployment ready at 127.0.0.1.
func readyPod(t *testing.T, ns, deployment string) string {
	t.Helper()
	return testenv.Get(t).ReadyPod(t, ns, map[string]string{"app": deployment})
}

// queueMetrics serves controller-runtime's workqueue metrics with depth
// as workqueue_depth, on 127.0.0.1 (the pods' address here).
func queueMetrics(t *testing.T) (port int32, depth *atomic.Int64, scraped *atomic.Int64) {
	depth, scraped = &atomic.Int64{}, &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(rw, r)
			return
		}
		scraped.Add(1)
		fmt.Fprintf(rw, "# TYPE workqueue_depth gauge\nworkqueue_depth{controller=\"a\",name=\"a\"} %d\nworkqueue_depth{controller=\"b\",name=\"b\"} 0\n", depth.Load())
		fmt.Fprintf(rw, "# TYPE workqueue_unfinished_work_seconds gauge\nworkqueue_unfinished_work_seconds{controller=\"a\",name=\"a\"} 0\n")
		fmt.Fprintf(rw, "# TYPE controller_runtime_active_workers gauge\ncontroller_runtime_active_workers{controller=\"a\"} 0\n")
	}))
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n), depth, scraped
}

// TestDeploymentSink: an unchanged operator's Deployment stays at 0 while
// only changes it does not need happen, is scaled to 1 by one it needs,
// is not stopped while its workqueue holds work, goes back to 0 once
// idle, and a change made as it stops wakes it again, with the Lease of
// the stopped pod released first.
func TestDeploymentSink(t *testing.T) {
	env, ctx, ns := withReader(t)
	c := env.Client
	port, depth, scraped := queueMetrics(t)
	h, _ := startHub(t, hub.Options{NoWakeups: true})
	must(t, c.Create(ctx, operatorDeployment(ns, "op", 0)))
	// It also watches Deployments and pods (a Deployment operator's
	// children): its own, which its scaling changes, must not wake it.
	operatorAccount(t, ns, "op-children", false, rbacv1.PolicyRule{APIGroups: []string{"", "apps"}, Resources: []string{"pods", "deployments", "replicasets"}, Verbs: []string{"get", "list", "watch"}})
	must(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op-children-for-op"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "op"}}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "op-children"}}))
	sub := deploymentSub(ns, "op", "op", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}, LabelSelector: "watched=yes"},
		v1alpha1.SubscribedResource{APIVersion: "apps/v1", Kind: "Deployment", Namespaces: []string{ns}},
		v1alpha1.SubscribedResource{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespaces: []string{ns}},
		v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "Pod", Namespaces: []string{ns}})
	sub.Spec.ScaleToZero = &v1alpha1.ScaleToZero{IdleAfter: &metav1.Duration{Duration: 2 * time.Second},
		Metrics: &v1alpha1.MetricsEndpoint{Port: port, Scheme: "http"}}
	// A peer operator that watches the namespace's pods and Deployments:
	// op's wakes and stops must not wake it (nor would they a classic
	// one, whose peers run on). Its Deployment is there before op's
	// Subscription, which would be woken by its creation (op watches
	// the namespace's Deployments). The Deployment controller writes its
	// status once after the create: that update must come before op's
	// Subscription too, or it wakes op (a change op watches, made after
	// its Subscription: a CI run under load saw "update Deployment peer").
	peer := operatorDeployment(ns, "peer", 0)
	must(t, c.Create(ctx, peer))
	testkit.Eventually(t, 30*time.Second, "the Deployment controller's status of peer", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(peer), peer)
		return err == nil && peer.Status.ObservedGeneration >= peer.Generation, err
	})
	must(t, c.Create(ctx, sub))
	must(t, c.Create(ctx, deploymentSub(ns, "peer", "peer", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "Pod", Namespaces: []string{ns}},
		v1alpha1.SubscribedResource{APIVersion: "apps/v1", Kind: "Deployment", Namespaces: []string{ns}})))
	condition(t, ns, "op", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	condition(t, ns, "peer", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	st := waitState(t, ns, "op", v1alpha1.TargetZero)
	if st.Wakes != 0 {
		t.Errorf("wakes %d before any change, want 0", st.Wakes)
	}

	// Only what it does not need changes: it stays at 0.
	for i := range 5 {
		must(t, c.Create(ctx, configMap(ns, fmt.Sprintf("unrelated-%d", i), nil)))
	}
	stays(t, ns, "op", 0, 2*time.Second, "only ConfigMaps without watched=yes changed")

	// One it needs: scaled to 1, the reason in the status.
	cm := configMap(ns, "wanted", nil)
	cm.Labels = map[string]string{"watched": "yes"}
	must(t, c.Create(ctx, cm))
	waitReplicas(t, ns, "op", 1, "a ConfigMap with watched=yes was made")
	st = waitState(t, ns, "op", v1alpha1.TargetWaking)
	if st.Wakes != 1 || !strings.Contains(st.LastWakeReason, "add ConfigMap "+ns+"/wanted") || st.LastWake == nil {
		t.Errorf("after the first wake: wakes %d, reason %q; want 1, the add of ConfigMap %s/wanted", st.Wakes, st.LastWakeReason, ns)
	}

	// Ready, with work queued: kept up past its idle period.
	depth.Store(3)
	pod := readyPod(t, ns, "op")
	testkit.Eventually(t, 30*time.Second, "the hub reads the operator's metrics", func(context.Context) (bool, error) {
		return scraped.Load() > 0 && strings.Contains(targetStatus(t, ns, "op").Metrics, "workqueue_depth 3"), nil
	})
	stays(t, ns, "op", 1, 4*time.Second, "its workqueue_depth is 3")

	// The operator's leader-election Lease, held by the pod (client-go's
	// identity <hostname>_<uuid>), not released on its stop.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "op.example.com"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod + "_4f2c"), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	must(t, c.Create(ctx, lease))

	// Work done: back to 0 after the idle period.
	depth.Store(0)
	waitReplicas(t, ns, "op", 0, "idle, its workqueue empty")
	waitState(t, ns, "op", v1alpha1.TargetZero)
	testkit.Eventually(t, 30*time.Second, "the stopped pod gone", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	})
	// At zero, its pod gone: the stale Lease is released before any wake.
	testkit.Eventually(t, 10*time.Second, "Lease "+lease.Name+" released at zero, its holder gone", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
			return false, err
		}
		return lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "", nil
	})
	if n := h.Stats().DeploymentWakes(); n != 1 {
		t.Errorf("opzero_hub_deployment_wakes_total %v before the change at zero, want 1", n)
	}

	// A change at zero wakes it again, the stale Lease released first.
	cm.Data = map[string]string{"k": "v"}
	must(t, c.Update(ctx, cm))
	waitReplicas(t, ns, "op", 1, "the watched ConfigMap was edited at zero")
	must(t, c.Get(ctx, client.ObjectKeyFromObject(lease), lease))
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Errorf("Lease %s still held by %q, a pod that is gone: the next pod waits its 15 s", lease.Name, *lease.Spec.HolderIdentity)
	}
	testkit.Eventually(t, 30*time.Second, "status.target after the second wake: wakes 2, the update of "+ns+"/wanted", func(context.Context) (bool, error) {
		got := targetStatus(t, ns, "op")
		return got.Wakes == 2 && strings.Contains(got.LastWakeReason, "update ConfigMap "+ns+"/wanted"), nil
	})
	if n := h.Stats().DeploymentWakes(); n != 2 {
		t.Errorf("opzero_hub_deployment_wakes_total %v, want 2", n)
	}

	// Its new pod ready, its queue empty: stopped when idle; a change made
	// right after the stop wakes it again.
	readyPod(t, ns, "op")
	waitReplicas(t, ns, "op", 0, "idle again")
	stays(t, ns, "op", 0, 4*time.Second, "only its own Deployment, ReplicaSet and pods changed (its stop)")
	cm.Data = map[string]string{"k": "v2"}
	must(t, c.Update(ctx, cm))
	waitReplicas(t, ns, "op", 1, "edited right after the stop")
	if st := targetStatus(t, ns, "peer"); st.Wakes != 0 || replicas(t, ns, "peer") != 0 {
		t.Errorf("the peer was woken %d times (last: %q): only op's Deployment and pods changed", st.Wakes, st.LastWakeReason)
	}
}

// TestDeploymentSinkBadInput: a Deployment that does not exist, one named
// by two Subscriptions, one scaled by an HPA, one scaled by hand, one
// whose pod never becomes ready, one deleted while served, a spec asking
// for Wakeups: each says what is wrong in a condition, the Deployment is
// left as the user had it, and the good target is served throughout.
func TestDeploymentSinkBadInput(t *testing.T) {
	env, ctx, ns := withReader(t)
	c := env.Client
	startHub(t, hub.Options{NoWakeups: true})
	watched := v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}}
	for _, d := range []*appsv1.Deployment{operatorDeployment(ns, "good", 0), operatorDeployment(ns, "shared", 0),
		operatorDeployment(ns, "hpa", 2), operatorDeployment(ns, "byhand", 0), operatorDeployment(ns, "never", 0), operatorDeployment(ns, "deleted", 0)} {
		must(t, c.Create(ctx, d))
	}
	must(t, c.Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hpa"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 4,
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hpa"}}}))
	idle := &v1alpha1.ScaleToZero{IdleAfter: &metav1.Duration{Duration: 2 * time.Second}, ReadyTimeout: &metav1.Duration{Duration: 2 * time.Second}}
	subs := map[string]*v1alpha1.Subscription{
		"good": deploymentSub(ns, "good", "good", watched), "missing": deploymentSub(ns, "missing", "nothing-here", watched),
		"hpa": deploymentSub(ns, "hpa", "hpa", watched), "byhand": deploymentSub(ns, "byhand", "byhand", watched),
		"never": deploymentSub(ns, "never", "never", watched), "deleted": deploymentSub(ns, "deleted", "deleted", watched),
		"wakeups": deploymentSub(ns, "wakeups", "good", watched),
	}
	subs["wakeups"].Spec.Wakeups = true
	// a kind its account may not watch; one it may list and watch but not
	// get (enough for its informers, so enough to be woken for)
	subs["forbidden"] = deploymentSub(ns, "forbidden", "good", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "Secret", Namespaces: []string{ns}})
	operatorAccount(t, ns, "lister", false, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}})
	subs["lister"] = deploymentSub(ns, "lister", "byhand", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "Pod", Namespaces: []string{ns}})
	subs["lister"].Spec.ServiceAccountName = "lister"
	for _, s := range subs {
		s.Spec.ScaleToZero = idle.DeepCopy()
	}
	must(t, c.Create(ctx, subs["good"]))
	condition(t, ns, "good", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	first := deploymentSub(ns, "shared-1", "shared", watched)
	must(t, c.Create(ctx, first))
	condition(t, ns, "shared-1", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp (seconds)
	must(t, c.Create(ctx, deploymentSub(ns, "shared-2", "shared", watched)))
	for k, s := range subs {
		if k != "good" {
			must(t, c.Create(ctx, s))
		}
	}

	condition(t, ns, "missing", v1alpha1.SubscriptionSinkResolved, metav1.ConditionFalse, "SinkNotFound")
	condition(t, ns, "shared-2", v1alpha1.SubscriptionSinkResolved, metav1.ConditionFalse, "TargetClaimed")
	condition(t, ns, "hpa", v1alpha1.SubscriptionSinkResolved, metav1.ConditionFalse, "TargetAutoscaled")
	condition(t, ns, "wakeups", v1alpha1.SubscriptionValid, metav1.ConditionFalse, "InvalidSpec")
	condition(t, ns, "forbidden", v1alpha1.SubscriptionAuthorized, metav1.ConditionFalse, "Forbidden")
	condition(t, ns, "lister", v1alpha1.SubscriptionAuthorized, metav1.ConditionTrue, "")
	for _, name := range []string{"missing", "shared-2", "hpa", "wakeups", "forbidden"} {
		condition(t, ns, name, v1alpha1.SubscriptionReady, metav1.ConditionFalse, "")
	}
	for _, name := range []string{"byhand", "never", "deleted"} {
		condition(t, ns, name, v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	}

	// Scaled by hand while served: left as it is, and said so.
	d := &appsv1.Deployment{}
	must(t, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "byhand"}, d))
	d.Spec.Replicas = ptr.To(int32(3))
	must(t, c.Update(ctx, d))
	condition(t, ns, "byhand", v1alpha1.SubscriptionTargetHealthy, metav1.ConditionFalse, "ScaledElsewhere")
	eventOn(t, ns, "byhand", "ScaledElsewhere")

	// Deleted while served.
	must(t, c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deleted"}}))
	condition(t, ns, "deleted", v1alpha1.SubscriptionSinkResolved, metav1.ConditionFalse, "SinkNotFound")

	// A change: the good targets wake, the others are left as they were.
	must(t, c.Create(ctx, configMap(ns, "change", nil)))
	waitReplicas(t, ns, "good", 1, "the good Subscription's change")
	waitReplicas(t, ns, "shared", 1, "its first Subscription's change")
	waitReplicas(t, ns, "never", 1, "a change")
	stays(t, ns, "hpa", 2, time.Second, "an HPA scales it")
	stays(t, ns, "byhand", 3, time.Second, "scaled by hand to 3")

	// A pod that never becomes ready: said so, and stopped once idle.
	condition(t, ns, "never", v1alpha1.SubscriptionTargetHealthy, metav1.ConditionFalse, "PodNotReady")
	waitReplicas(t, ns, "never", 0, "no pod became ready: stopped when idle")
	waitReplicas(t, ns, "good", 0, "idle")

	// Handed back (scaled to 0 by hand): served again.
	must(t, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "byhand"}, d))
	d.Spec.Replicas = ptr.To(int32(0))
	must(t, c.Update(ctx, d))
	condition(t, ns, "byhand", v1alpha1.SubscriptionTargetHealthy, metav1.ConditionTrue, "")
	must(t, c.Create(ctx, configMap(ns, "change-2", nil)))
	waitReplicas(t, ns, "byhand", 1, "handed back, then a change")
	if got := replicas(t, ns, "hpa"); got != 2 {
		t.Errorf("the HPA's Deployment has %d replicas, want its 2 untouched", got)
	}

	// Its Subscription deleted while at zero: handed back, always on.
	waitReplicas(t, ns, "good", 0, "idle after the last change")
	must(t, c.Delete(ctx, subs["good"]))
	waitReplicas(t, ns, "good", 1, "its Subscription deleted: the operator runs as before")
}

// TestDeploymentSinkReplicaKilledWhileWaking: the replica serving a
// Deployment sink is killed (SIGKILL: nothing more leaves it) as it
// scales the Deployment up for a change: its write never reaches the API
// server, so the change's progress never moved, and the other replica,
// once it holds the bucket, wakes the Deployment for that change (no
// other change is made).
func TestDeploymentSinkReplicaKilledWhileWaking(t *testing.T) {
	_, ctx, ns := withReader(t)
	c := testenv.Get(t).Client
	f := newFleet(t, 1)
	f.preassign(0, "a")
	var killed atomic.Bool
	f.before = func(r *replica, req *http.Request) {
		if r.name == "a" && req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/deployments/op/scale") && !killed.Swap(true) {
			r.cut.Store(true) // this request is not sent
			go r.kill()
		}
	}
	a, b := f.start("a", hub.Options{}), f.start("b", hub.Options{})
	f.heldBy(a, a, b)
	must(t, c.Create(ctx, operatorDeployment(ns, "op", 0)))
	must(t, c.Create(ctx, deploymentSub(ns, "op", "op", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})))
	condition(t, ns, "op", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	waitState(t, ns, "op", v1alpha1.TargetZero)

	must(t, c.Create(ctx, configMap(ns, "first", nil)))
	testkit.Eventually(t, 30*time.Second, "replica a killed as it wakes the Deployment", func(context.Context) (bool, error) { return killed.Load(), nil })
	<-a.done
	if got := replicas(t, ns, "op"); got != 0 {
		t.Fatalf("Deployment at %d replicas: the killed replica's scale write went through", got)
	}
	testkit.Eventually(t, 40*time.Second, "the Deployment woken by replica b (the bucket's Lease expires after 10 s)", func(context.Context) (bool, error) {
		return replicas(t, ns, "op") == 1, nil
	})
	st := waitState(t, ns, "op", v1alpha1.TargetWaking)
	if st.LastWakeReason != "add ConfigMap "+ns+"/first" || st.Wakes != 1 {
		t.Errorf("after the hand-off: wakes %d, reason %q; want 1, the add of %s/first", st.Wakes, st.LastWakeReason, ns)
	}
	if n := b.h.Stats().DeploymentWakes(); n != 1 {
		t.Errorf("replica b woke it %v times, want 1 (once up, later changes find it up)", n)
	}
	f.checkWrites()
}
