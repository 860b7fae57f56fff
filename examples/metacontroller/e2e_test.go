package metacontroller_test

import (
	"bytes"
	"fmt"
	"context"
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
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
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

type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var helloGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "HelloWorld"}

// objects are `opzero manifests` of opzero-metacontroller for the
// HelloWorld controller, the controller, and the hook's Service and Secret,
// all in namespace ns.
func objects(t *testing.T, root, ns string) []*unstructured.Unstructured {
	t.Helper()
	t.Setenv(metacontroller.FilesEnv, filepath.Join(root, "examples/metacontroller/helloworld"))
	objs, err := manifests.Build(context.Background(), root, "./cmd/opzero-metacontroller", manifests.Options{Namespace: ns,
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
	for _, f := range []string{"controller.yaml", "hook.yaml"} {
		more, err := dev.ReadManifests(filepath.Join(root, "examples/metacontroller/helloworld", f), nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, more...)
	}
	for _, o := range out {
		switch o.GetKind() {
		case "PingSource":
			_ = unstructured.SetNestedField(o.Object, "0 0 1 1 *", "spec", "schedule")
		case "CompositeController":
			for _, h := range []string{"sync", "finalize"} {
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

// TestHelloWorldThroughDev is issue 17's path: opzero-metacontroller
// serverless through `opzero dev`, its hook a Python process that scales
// to zero too.
func TestHelloWorldThroughDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, Knative's adapters, the operator and a Python hook")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	c := env.Client
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := t.TempDir()
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objects(t, root, ns), Dir: logs,
		CacheDir: cacheDir, BuildDir: root, Idle: 3 * time.Second, Out: logWriter{t}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		p.Stop()
		if t.Failed() {
			matches, _ := filepath.Glob(filepath.Join(logs, "service-*"))
			for _, m := range matches {
				b, _ := os.ReadFile(m)
				t.Logf("%s:\n%s", m, b)
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

	// Parent changed -> the ConfigMap updated in place, the Pod recreated.
	_ = unstructured.SetNestedField(hw.Object, "opzero", "spec", "who")
	if err := c.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
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

	// A hook that answers garbage: condition and Event, no child touched.
	_ = c.Get(ctx, key, hw)
	_ = unstructured.SetNestedField(hw.Object, "garbage", "spec", "who")
	if err := c.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "Synced=False HookAnswerInvalid and a Warning Event on the HelloWorld", func(ctx context.Context) (bool, error) {
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
			ev = ev || (e.InvolvedObject.Name == "your-name" && e.Reason == "HookAnswerInvalid" && e.Type == "Warning")
		}
		return found && ev, nil
	})
	if err := c.Get(ctx, key, cm); err != nil || cm.UID != cmUID || cm.Data["greeting"] != "Hello, opzero!" {
		t.Fatalf("a garbage answer touched the ConfigMap: %v %v", err, cm.Data)
	}

	// resyncAfterSeconds fires while the operator is at zero.
	_ = c.Get(ctx, key, hw)
	_ = unstructured.SetNestedField(hw.Object, "Resync", "spec", "who")
	_ = unstructured.SetNestedField(hw.Object, int64(8), "spec", "resyncAfterSeconds")
	if err := c.Update(ctx, hw); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "synced again", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, cm)
		return err == nil && cm.Data["greeting"] == "Hello, Resync!", err
	})
	testkit.Eventually(t, 60*time.Second, "the operator at zero", func(context.Context) (bool, error) { return operatorProcesses() == 0, nil })
	before := calls("/sync")
	testkit.Eventually(t, 60*time.Second, "a sync from resyncAfterSeconds after the operator scaled to zero", func(context.Context) (bool, error) {
		return calls("/sync") > before, nil
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
