package metacontroller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/metacontroller"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

var cacheDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "opzero-metacontroller-e2e-")
	if err != nil {
		panic(err)
	}
	cacheDir = dir
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	code := testenv.Main(m, testenv.Options{KnativeCRDs: true, Scheme: scheme,
		CRDDirs: []string{"../../config/metacontroller", "helloworld/crd.yaml"}})
	os.RemoveAll(dir)
	os.Exit(code)
}

var helloGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "HelloWorld"}

// objects are `opzero manifests` of opzero-metacontroller for the
// HelloWorld controller, the controller, and the hook's Service and Secret,
// all in namespace ns.
func objects(t *testing.T, root, ns, mode string) []*unstructured.Unstructured {
	t.Helper()
	t.Setenv(metacontroller.FilesEnv, filepath.Join(root, "examples/metacontroller/helloworld")+","+
		filepath.Join(root, "examples/metacontroller/service-per-pod"))
	objs, err := manifests.Build(context.Background(), root, "./cmd/opzero-metacontroller", manifests.Options{Namespace: ns, Mode: mode,
		Idle: 3 * time.Second,
		Env:  []description.EnvVar{{Name: metacontroller.TokenEnv, Secret: &description.KeyRef{Name: "hello-hook", Key: "token"}}}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"helloworld/controller.yaml", "helloworld/hook.yaml", "service-per-pod/controller.yaml", "service-per-pod/hook.yaml"} {
		more, err := dev.ReadManifests(filepath.Join(root, "examples/metacontroller", f), nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, more...)
	}
	for _, o := range out {
		switch o.GetKind() {
		case "PingSource":
			_ = unstructured.SetNestedField(o.Object, "0 0 1 1 *", "spec", "schedule")
		case "CompositeController", "DecoratorController":
			for _, h := range []string{"sync", "finalize", "customize"} {
				if _, ok, _ := unstructured.NestedMap(o.Object, "spec", "hooks", h); !ok {
					continue
				}
				_ = unstructured.SetNestedField(o.Object, ns, "spec", "hooks", h, "webhook", "service", "namespace")
			}
		case "Service", "Secret":
			o.SetNamespace(ns)
		}
	}
	return out
}

// operatorProcesses counts live opzero-metacontroller processes (/proc).
func operatorProcesses() int {
	exes, _ := filepath.Glob(filepath.Join(cacheDir, "*opzero-metacontroller*"))
	n := 0
	for _, exe := range exes {
		procs, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, p := range procs {
			if target, err := os.Readlink(p); err == nil && target == exe {
				var pid int
				if _, err := fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid); err == nil && !proc.Dead(pid) {
					n++
				}
			}
		}
	}
	return n
}

// TestMetacontrollerThroughDev is issue 17's path: one opzero-metacontroller
// serves HelloWorld (a CompositeController, Python hook) and
// service-per-pod (a DecoratorController, Node hook) through `opzero dev`,
// serverless and classic; the hooks are Knative Services that scale to
// zero too.
func TestMetacontrollerThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, Knative's adapters, the operator and the hooks")
	}
	for _, mode := range []string{manifests.Serverless, manifests.Classic} {
		t.Run(mode, func(t *testing.T) { exercise(t, mode) })
	}
}

func exercise(t *testing.T, mode string) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	c := env.Client
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	logs := t.TempDir()
	p := devtest.Start(t, ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objects(t, root, ns, mode), Dir: logs,
		CacheDir: cacheDir, BuildDir: root, Idle: 3 * time.Second})
	t.Cleanup(func() {
		if t.Failed() {
			wl := &unstructured.UnstructuredList{}
			wl.SetAPIVersion("opzero.dev/v1alpha1")
			wl.SetKind("WakeupList")
			if err := c.List(context.Background(), wl, client.InNamespace(ns)); err == nil {
				for _, w := range wl.Items {
					t.Logf("Wakeup %s: %v", w.GetName(), w.Object["spec"])
				}
			}
		}
	})
	hookLog := p.LogPath("service-" + ns + "-hello-hook")
	calls := func(path string) int {
		b, _ := os.ReadFile(hookLog)
		return strings.Count(string(b), "POST "+path+" ")
	}

	// Parent created -> children created by the hook's answer.
	hw := &unstructured.Unstructured{}
	hw.SetGroupVersionKind(helloGVK)
	hw.SetNamespace(ns)
	hw.SetName("your-name")
	_ = unstructured.SetNestedField(hw.Object, "Your Name", "spec", "who")
	if err := c.Create(ctx, hw); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(hw)
	pod, cm := &corev1.Pod{}, &corev1.ConfigMap{}
	testkit.Eventually(t, 90*time.Second, "the hook's Pod and ConfigMap, owned by the HelloWorld, and its status", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, pod); err != nil {
			return false, err
		}
		if err := c.Get(ctx, key, cm); err != nil {
			return false, err
		}
		if err := c.Get(ctx, key, hw); err != nil {
			return false, err
		}
		g, _, _ := unstructured.NestedString(hw.Object, "status", "greeting")
		ref := metav1.GetControllerOf(cm)
		return g == "Hello, Your Name!" && ref != nil && ref.UID == hw.GetUID() && cm.Data["greeting"] == g, nil
	})
	if got := hw.GetFinalizers(); len(got) != 1 || got[0] != "metacontroller.io/compositecontroller-hello-controller" {
		t.Fatalf("finalizers %v, want Metacontroller's", got)
	}
	podUID, cmUID := pod.UID, cm.UID

	decorate(t, c, ns, p.LogPath("service-"+ns+"-service-per-pod-hook"))

	// Parent changed -> the ConfigMap updated in place, the Pod recreated.
	patchSpec(t, c, hw, `{"spec":{"who":"opzero"}}`)
	testkit.Eventually(t, 60*time.Second, "ConfigMap updated in place (InPlace), Pod recreated (Recreate)", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, cm); err != nil {
			return false, err
		}
		if err := c.Get(ctx, key, pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return cm.UID == cmUID && cm.Data["greeting"] == "Hello, opzero!" && pod.UID != podUID &&
			pod.Annotations["greeting"] == "Hello, opzero!", nil
	})

	// Child deleted by hand -> recreated.
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the deleted ConfigMap recreated", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cm)
		return err == nil && cm.UID != cmUID, client.IgnoreNotFound(err)
	})
	cmUID = cm.UID

	// Customize: spec.whoFrom names a related ConfigMap, sent to sync;
	// changing it syncs again (opzero.dev/related-resources watches it; no
	// resync is due now: only the ConfigMap's event can cause that sync).
	who := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "who-source"}, Data: map[string]string{"who": "Related"}}
	if err := c.Create(ctx, who); err != nil {
		t.Fatal(err)
	}
	patchSpec(t, c, hw, `{"spec":{"whoFrom":"who-source"}}`)
	testkit.Eventually(t, 60*time.Second, "the children built from the related ConfigMap", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, pod); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		err := c.Get(ctx, key, cm)
		return err == nil && cm.Data["greeting"] == "Hello, Related!" && pod.Annotations["greeting"] == "Hello, Related!", err
	})
	// No sync for 2 s: the syncs the Pod's recreation caused are over.
	last, since := calls("/sync"), time.Now()
	testkit.Eventually(t, 60*time.Second, "the syncs the edit caused to end", func(context.Context) (bool, error) {
		if n := calls("/sync"); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > 2*time.Second, nil
	})
	patchSpec(t, c, who, `{"data":{"who":"Changed"}}`)
	testkit.Eventually(t, 60*time.Second, "a sync caused by the related ConfigMap's change", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cm)
		return err == nil && cm.Data["greeting"] == "Hello, Changed!", err
	})
	patchSpec(t, c, hw, `{"spec":{"whoFrom":null}}`)
	testkit.Eventually(t, 60*time.Second, "the greeting back to spec.who", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cm)
		return err == nil && cm.Data["greeting"] == "Hello, opzero!", err
	})
	if cm.UID != cmUID {
		t.Fatalf("the ConfigMap child was replaced, want it updated in place")
	}

	// A hook that answers garbage: condition and Event, no child touched.
	patchSpec(t, c, hw, `{"spec":{"who":"garbage"}}`)
	testkit.Eventually(t, 60*time.Second, "Synced=False HookAnswerInvalid and a Warning Event SyncError (Metacontroller's reason) on the HelloWorld", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, hw); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(hw.Object, "status", "conditions")
		found := false
		for _, x := range conds {
			m, _ := x.(map[string]any)
			found = found || (m["type"] == "Synced" && m["status"] == "False" && m["reason"] == "HookAnswerInvalid")
		}
		evs := &corev1.EventList{}
		if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		ev := false
		for _, e := range evs.Items {
			ev = ev || (e.InvolvedObject.Name == "your-name" && e.Reason == "SyncError" && e.Type == "Warning" &&
				strings.HasPrefix(e.Message, "Sync error: HookAnswerInvalid: "))
		}
		return found && ev, nil
	})
	if err := c.Get(ctx, key, cm); err != nil || cm.UID != cmUID || cm.Data["greeting"] != "Hello, opzero!" {
		t.Fatalf("a garbage answer touched the ConfigMap: %v %v", err, cm.Data)
	}

	// resyncAfterSeconds fires while the operator is at zero.
	patchSpec(t, c, hw, `{"spec":{"who":"Resync","resyncAfterSeconds":8}}`)
	testkit.Eventually(t, 60*time.Second, "synced again", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cm)
		return err == nil && cm.Data["greeting"] == "Hello, Resync!", err
	})
	what := "a sync from resyncAfterSeconds"
	if mode == manifests.Serverless {
		testkit.Eventually(t, 60*time.Second, "the operator at zero", func(context.Context) (bool, error) { return operatorProcesses() == 0, nil })
		what += " after the operator scaled to zero"
	} else {
		// No sync for 2 s: what the edit caused is over (the resync is 8 s).
		last, since := calls("/sync"), time.Now()
		testkit.Eventually(t, 60*time.Second, "the syncs the edit caused to end", func(context.Context) (bool, error) {
			if n := calls("/sync"); n != last {
				last, since = n, time.Now()
			}
			return time.Since(since) > 2*time.Second, nil
		})
	}
	before := calls("/sync")
	testkit.Eventually(t, 60*time.Second, what, func(context.Context) (bool, error) {
		return calls("/sync") > before, nil
	})

	// A changed controller restarts the operator, which then serves it.
	cc := &unstructured.Unstructured{}
	cc.SetAPIVersion("metacontroller.k8s.io/v1alpha1")
	cc.SetKind("CompositeController")
	cc.SetName("hello-controller")
	patchSpec(t, c, cc, `{"spec":{"parentResource":{"revisionHistory":{"fieldPaths":["spec.`+mode+`"]}}}}`)
	opLog := p.LogPath("service-" + ns + "-metacontroller")
	if mode == manifests.Classic {
		opLog = p.LogPath("deployment-" + ns + "-metacontroller")
	}
	testkit.Eventually(t, 60*time.Second, "the operator restarting after the CompositeController changed", func(context.Context) (bool, error) {
		b, _ := os.ReadFile(opLog)
		return strings.Contains(string(b), "CompositeController hello-controller changed"), nil
	})
	second := &unstructured.Unstructured{}
	second.SetGroupVersionKind(helloGVK)
	second.SetNamespace(ns)
	second.SetName("second")
	if err := c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the restarted operator syncing a new HelloWorld", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(second), &corev1.ConfigMap{})
		return err == nil, client.IgnoreNotFound(err)
	})

	// Parent deleted -> finalize hook called, children garbage-collected.
	if err := c.Delete(ctx, hw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "finalize hook called, HelloWorld gone, children collected", func(ctx context.Context) (bool, error) {
		if calls("/finalize") == 0 {
			return false, nil
		}
		for _, o := range []client.Object{hw, cm, pod} {
			if err := c.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
}

// decorate is service-per-pod: a StatefulSet gets one Service per replica;
// fewer replicas delete one; a changed annotation leaves the Services
// alone (OnDelete) until one is deleted by hand; deleting the StatefulSet
// calls the finalize hook and the Services go.
func decorate(t *testing.T, c client.Client, ns, hookLog string) {
	ctx := context.Background()
	sts := &unstructured.Unstructured{}
	b, err := os.ReadFile("service-per-pod/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &sts.Object); err != nil {
		t.Fatal(err)
	}
	sts.SetNamespace(ns)
	if err := c.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	uid := sts.GetUID()
	services := func(ctx context.Context) (map[string]corev1.Service, error) {
		l := &corev1.ServiceList{}
		if err := c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{"app": "service-per-pod"}); err != nil {
			return nil, err
		}
		out := map[string]corev1.Service{}
		for _, s := range l.Items {
			if ref := metav1.GetControllerOf(&s); s.DeletionTimestamp == nil && ref != nil && ref.UID == uid {
				out[s.Name] = s
			}
		}
		return out, nil
	}
	want := func(names ...string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			got, err := services(ctx)
			if err != nil || len(got) != len(names) {
				return false, err
			}
			for _, n := range names {
				if s, ok := got[n]; !ok || s.Spec.Selector["statefulset.kubernetes.io/pod-name"] != n {
					return false, nil
				}
			}
			return true, nil
		}
	}
	testkit.Eventually(t, 60*time.Second, "a Service per pod of the StatefulSet", want("nginx-0", "nginx-1", "nginx-2"))
	patchSpec(t, c, sts, `{"spec":{"replicas":2}}`)
	testkit.Eventually(t, 60*time.Second, "the Service of the removed replica deleted", want("nginx-0", "nginx-1"))

	// OnDelete: new ports leave the Services alone until one is deleted.
	syncs := func() int { b, _ := os.ReadFile(hookLog); return strings.Count(string(b), "POST /sync ") }
	before := syncs()
	patchSpec(t, c, sts, `{"metadata":{"annotations":{"service-per-pod-ports":"80:9090"}}}`)
	testkit.Eventually(t, 60*time.Second, "a sync after the ports changed", func(context.Context) (bool, error) { return syncs() > before, nil })
	target := func(ctx context.Context, name string) (int32, error) {
		got, err := services(ctx)
		if s, ok := got[name]; ok && len(s.Spec.Ports) == 1 {
			return s.Spec.Ports[0].TargetPort.IntVal, err
		}
		return 0, err
	}
	if tp, err := target(ctx, "nginx-1"); err != nil || tp != 8080 {
		t.Fatalf("OnDelete: Service nginx-1 targets %d (%v), want 8080 until it is deleted", tp, err)
	}
	if err := c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nginx-1"}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "Service nginx-1 recreated with the new port", func(ctx context.Context) (bool, error) {
		tp, err := target(ctx, "nginx-1")
		return tp == 9090, err
	})
	if err := c.Delete(ctx, sts); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "finalize hook called, StatefulSet gone, its Services deleted", func(ctx context.Context) (bool, error) {
		b, _ := os.ReadFile(hookLog)
		if !strings.Contains(string(b), "POST /finalize ") {
			return false, nil
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sts), sts); !apierrors.IsNotFound(err) {
			return false, err
		}
		got, err := services(ctx)
		return err == nil && len(got) == 0, err
	})
}

// patchSpec merge-patches o (the operator writes status and finalizers
// meanwhile: an Update could conflict).
func patchSpec(t *testing.T, c client.Client, o client.Object, patch string) {
	t.Helper()
	if err := c.Patch(context.Background(), o, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
