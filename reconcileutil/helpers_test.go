package reconcileutil_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/reconcileutil"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1.AddToScheme(s)
	os.Exit(testenv.Main(m, testenv.Options{CRDDirs: []string{"../examples/configwatcher/config/crd"}, Scheme: s, NoControllerManager: true}))
}

const fin = "test.opzero.dev/cleanup"

func newCW(ns string) *v1.ConfigWatcher {
	return &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "cw", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "cm", PodSelector: map[string]string{"a": "b"}}}
}

func TestFinalizerFlow(t *testing.T) {
	env := testenv.Get(t)
	ctx, c := context.Background(), env.Client
	cw := newCW(env.Namespace(t))
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		added, err := reconcileutil.EnsureFinalizer(ctx, c, cw, fin)
		if err != nil || added != want {
			t.Fatalf("EnsureFinalizer #%d: added=%v err=%v, want added=%v", i+1, added, err, want)
		}
	}
	if deleting, err := reconcileutil.HandleDeletion(ctx, c, cw, fin, func(context.Context) error { t.Fatal("cleanup before deletion"); return nil }); deleting || err != nil {
		t.Fatalf("HandleDeletion of a live object: deleting=%v err=%v", deleting, err)
	}
	if err := c.Delete(ctx, cw); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil {
		t.Fatalf("the finalizer should hold the object: %v", err)
	}
	boom := errors.New("backend down")
	if _, err := reconcileutil.HandleDeletion(ctx, c, cw, fin, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed cleanup: %v, want the cleanup's error", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil || len(cw.Finalizers) != 1 {
		t.Fatalf("a failed cleanup must keep the finalizer: %v %v", err, cw.Finalizers)
	}
	cleanups := 0
	stale := cw.DeepCopy()
	for i := 0; i < 2; i++ { // the second call, on a stale copy, must be harmless
		obj := cw
		if i == 1 {
			obj = stale
		}
		deleting, err := reconcileutil.HandleDeletion(ctx, c, obj, fin, func(context.Context) error { cleanups++; return nil })
		if !deleting || (err != nil && !apierrors.IsConflict(err) && !apierrors.IsInvalid(err)) {
			t.Fatalf("HandleDeletion #%d: deleting=%v err=%v", i+1, deleting, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cw), cw); !apierrors.IsNotFound(err) {
		t.Fatalf("object after its finalizer was removed: %v, want NotFound", err)
	}
	if cleanups < 1 {
		t.Fatal("cleanup never ran")
	}
}

func TestUpdateStatusRetriesConflicts(t *testing.T) {
	env := testenv.Get(t)
	ctx, c := context.Background(), env.Client
	cw := newCW(env.Namespace(t))
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	stale := cw.DeepCopy()
	cw.Status.Restarts = 5
	if err := c.Status().Update(ctx, cw); err != nil {
		t.Fatal(err)
	}
	calls := 0
	err := reconcileutil.UpdateStatus(ctx, c, stale, func() error { calls++; stale.Status.Restarts++; return nil })
	if err != nil || calls != 2 || stale.Status.Restarts != 6 {
		t.Fatalf("UpdateStatus on a stale copy: err=%v calls=%d restarts=%d, want a retry on a fresh read giving 6", err, calls, stale.Status.Restarts)
	}
	gone := newCW(cw.Namespace)
	gone.Name = "gone"
	if err := reconcileutil.UpdateStatus(ctx, c, gone, func() error { return nil }); !apierrors.IsNotFound(err) {
		t.Fatalf("UpdateStatus of a missing object: %v, want NotFound at once", err)
	}
}

func TestObservedGenerationAndReady(t *testing.T) {
	cw := newCW("ns")
	cw.Status.ObservedGeneration = 3
	if g, ok := reconcileutil.ObservedGeneration(cw); !ok || g != 3 {
		t.Fatalf("typed: %d %v", g, ok)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"observedGeneration": int64(4)}}}
	if g, ok := reconcileutil.ObservedGeneration(u); !ok || g != 4 {
		t.Fatalf("unstructured: %d %v", g, ok)
	}
	if _, ok := reconcileutil.ObservedGeneration(&corev1.ConfigMap{}); ok {
		t.Fatal("a ConfigMap has no observedGeneration")
	}
	var conds []metav1.Condition
	reconcileutil.SetReady(&conds, 2, metav1.ConditionFalse, "Waiting", "no ConfigMap")
	first := conds[0].LastTransitionTime
	reconcileutil.SetReady(&conds, 3, metav1.ConditionFalse, "Waiting", "still none")
	if len(conds) != 1 || conds[0].LastTransitionTime != first || conds[0].ObservedGeneration != 3 {
		t.Fatalf("same status must keep lastTransitionTime: %+v", conds)
	}
}

// TestRecordersWriteBeforeReturning: right after the call returns, the
// Event can be listed (both APIs).
func TestRecordersWriteBeforeReturning(t *testing.T) {
	env := testenv.Get(t)
	ctx, c := context.Background(), env.Client
	cw := newCW(env.Namespace(t))
	if err := c.Create(ctx, cw); err != nil {
		t.Fatal(err)
	}
	reconcileutil.NewEventRecorder(c, env.Scheme, "tester").Eventf(cw, nil, corev1.EventTypeNormal, "Restarted", "Restart", "restarted %d pods", 2)
	evs := &eventsv1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace(cw.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 || evs.Items[0].Regarding.Name != "cw" || evs.Items[0].Regarding.Kind != "ConfigWatcher" ||
		evs.Items[0].Note != "restarted 2 pods" || evs.Items[0].ReportingController != "tester" {
		t.Fatalf("events.k8s.io Events right after Eventf: %+v", evs.Items)
	}
	reconcileutil.NewLegacyEventRecorder(c, env.Scheme, "tester").Eventf(cw, corev1.EventTypeWarning, "Failed", "could not %s", "restart")
	core := &corev1.EventList{}
	if err := c.List(ctx, core, client.InNamespace(cw.Namespace)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range core.Items {
		found = found || (e.Reason == "Failed" && e.Type == "Warning" && strings.Contains(e.Message, "could not restart") && e.InvolvedObject.UID == cw.UID)
	}
	if !found {
		t.Fatalf("core/v1 Event right after Eventf not found among %d", len(core.Items))
	}
}
