package manifests_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/examples/configwatcher/controller"
	"github.com/opzero/opzero/internal/auth"
	"github.com/opzero/opzero/internal/backoff"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/wakeup"
	"github.com/opzero/opzero/reconcileutil"
	"github.com/opzero/opzero/testenv"
)

// as returns a client that acts as service account ns/sa.
func as(t *testing.T, env *testenv.Env, ns, sa string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTheCodeRunsOnTheGeneratedRBAC runs the real code paths as the
// generated service accounts: the ConfigWatcher reconciler (a change that
// restarts pods, a status write, an Event), the wakeup store the serverless
// engine records retries in, delivery authentication (TokenReview), and the
// wakeup source's token request. Only the generated RBAC grants anything.
func TestTheCodeRunsOnTheGeneratedRBAC(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	o := manifests.Options{Mode: manifests.Serverless, Source: manifests.SourceKnative, Namespace: ns} // the wakeup source's account too
	applyRBAC(t, env, generate(t, o))
	appNS := env.Namespace(t) // the objects live in another namespace than the operator
	op := as(t, env, ns, "configwatcher")

	// The reconciler: first sight records the ConfigMap, a change restarts.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: appNS}, Data: map[string]string{"k": "1"}}
	mustCreate(t, env, cm)
	for _, n := range []string{"web-1", "web-2"} {
		mustCreate(t, env, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: appNS, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}})
	}
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "cw", Namespace: appNS},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "app-config", PodSelector: map[string]string{"app": "web"}}}
	mustCreate(t, env, cw)
	r := &controller.ConfigWatcherReconciler{Client: op, Recorder: reconcileutil.NewEventRecorder(op, env.Scheme, "configwatcher")}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: appNS, Name: "cw"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("first reconcile as the operator: %v", err)
	}
	cm.Data["k"] = "2"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("reconcile of a change as the operator: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := env.Client.List(ctx, pods, client.InNamespace(appNS)); err != nil {
		t.Fatal(err)
	}
	events := &eventsv1.EventList{}
	if err := env.Client.List(ctx, events, client.InNamespace(appNS)); err != nil {
		t.Fatal(err)
	}
	if cw.Status.Restarts != 1 || len(pods.Items) != 0 || len(events.Items) == 0 {
		t.Fatalf("as the operator: restarts %d (want 1), pods left %d (want 0), events %d (want some)",
			cw.Status.Restarts, len(pods.Items), len(events.Items))
	}

	// The wakeup store: a retry recorded, found overdue, cleared.
	fc := testingclock.NewFakeClock(time.Now())
	store := wakeup.NewStore(op, wakeup.StoreOptions{Operator: "configwatcher", Target: v1.GroupVersion.WithKind("ConfigWatcher"),
		Sink: "http://configwatcher." + ns + ".svc.cluster.local", Policy: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond}, Namespace: ns, Clock: fc})
	if _, _, err := store.Failed(ctx, req); err != nil {
		t.Fatalf("recording a retry as the operator: %v", err)
	}
	if err := store.Requeue(ctx, req, time.Millisecond); err != nil {
		t.Fatalf("recording a RequeueAfter as the operator: %v", err)
	}
	fc.Step(10 * time.Millisecond) // past the RequeueAfter
	if due, err := store.Overdue(ctx); err != nil || len(due) != 1 {
		t.Fatalf("listing overdue wakeups as the operator: %v %v", due, err)
	}
	if err := store.Succeeded(ctx, req); err != nil {
		t.Fatalf("clearing the wakeup as the operator: %v", err)
	}

	// Delivery authentication: the wakeup source mints a token of itself
	// for the operator's audience; the operator reviews it.
	token, err := wakeup.TokenRequester(as(t, env, ns, "configwatcher-wakeup-source"), ns, "configwatcher-wakeup-source", "opzero:"+ns+":configwatcher")(ctx)
	if err != nil {
		t.Fatalf("the wakeup source requesting its token: %v", err)
	}
	id, err := auth.NewTokenReviewer(op, "opzero:"+ns+":configwatcher", 0).Authenticate(ctx, token)
	if err != nil {
		t.Fatalf("the operator reviewing a delivery token: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":configwatcher-wakeup-source"; id.Username != want {
		t.Fatalf("token of %q, want %q", id.Username, want)
	}
}

func mustCreate(t *testing.T, env *testenv.Env, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}
