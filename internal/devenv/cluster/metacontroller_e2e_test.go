package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opzero/opzero/internal/testkit"
)

var gvrHelloWorld = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "helloworlds"}

// metacontroller is examples/metacontroller's Run it block on real
// Knative, in its own namespace (default), as a user types it: `opzero
// manifests` of ./cmd/opzero-metacontroller for the HelloWorld and
// service-per-pod controllers (the default wiring: a Subscription to the
// hub), the CRD, the controllers and the hooks' Knative Services copied
// beside them, all applied unchanged by `opzero
// cluster apply` (the operator's ko:// images and the hooks'
// dev.opzero.dev/command images, Python's and Node's, built here). A
// HelloWorld (in a namespace of this run) created at zero pods gets its
// Pod and ConfigMap; an edit of spec.who updates the ConfigMap in place
// and recreates the Pod; its deletion runs the finalize hook; the operator
// and then the Python hook scale to zero.
func (e *e2e) metacontroller(t *testing.T) {
	const svc, hook = "metacontroller", "hello-hook"
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "deploy")
	args := []string{"manifests", "--operator", "./cmd/opzero-metacontroller", "--idle", "6s",
		"--env-secret", "METACONTROLLER_HOOK_TOKEN=hello-hook:token", "-o", dir}
	cmd := e.command(e.opzero, args...)
	cmd.Env = append(os.Environ(), "OPZERO_METACONTROLLER_FILES=examples/metacontroller/helloworld,examples/metacontroller/service-per-pod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opzero %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, f := range []string{"helloworld/crd", "helloworld/controller", "helloworld/hook", "service-per-pod/controller", "service-per-pod/hook"} {
		b, err := os.ReadFile(filepath.Join(e.root, "examples/metacontroller", f+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(f, "/", "-")+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// what the cleanup deletes: all but the hub (hub.yaml: the cluster's,
	// every operator's)
	ours, err := readManifestsExcept(dir, "hub.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("OPZERO_E2E_KEEP") != "" {
			return
		}
		// Everything but the CRDs (wakeups.opzero.dev is every
		// operator's) and the hub, once this run's namespace and its
		// HelloWorlds are going.
		_, _, rest := splitCRDs(ours)
		if out, err := e.c.kubectl(context.Background(), rest, "delete", "--ignore-not-found", "--wait=false", "-f", "-"); err != nil {
			t.Logf("deleting the example: %v\n%s", err, out)
		}
	})
	ns := e.namespace(t, "e2e-metacontroller")
	t0 := time.Now()
	apply := e.command(e.opzero, "cluster", "apply", "--dir", e.c.Dir, "-f", dir, "--build-dir", e.root)
	out, err := apply.CombinedOutput()
	if err != nil {
		t.Fatalf("opzero cluster apply: %v\n%s", err, out)
	}
	t.Logf("$ opzero cluster apply -f %s (images built and loaded, applied in %s):\n%s", dir, time.Since(t0).Round(time.Millisecond), out)
	t0 = time.Now()
	e.readyNamed(t, "default", gvrKsvc, svc, hook, "service-per-pod-hook")
	e.hubRolledOut(t)
	e.readyNamed(t, "default", gvrSubscription, svc)
	sub, err := e.dyn.Resource(gvrSubscription).Namespace("default").Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, _, _ := unstructured.NestedSlice(sub.Object, "spec", "resources")
	var kinds []string
	for _, r := range res {
		m, _ := r.(map[string]any)
		kinds = append(kinds, fmt.Sprint(m["kind"]))
	}
	sort.Strings(kinds)
	if got, want := strings.Join(kinds, ","), "CompositeController,ConfigMap,DecoratorController,HelloWorld,Pod,Service,StatefulSet"; got != want {
		t.Errorf("the Subscription's kinds: %s; want %s", got, want)
	}
	t.Logf("the operator's and both hooks' Knative Services Ready, the hub available and the Subscription (%d kinds: %s) Ready %s after apply",
		len(kinds), strings.Join(kinds, ", "), time.Since(t0).Round(time.Millisecond))
	t.Logf("the operator's first pod gone %s later", e.waitZero(t, "default", svc).Round(time.Second))

	hw := e.dyn.Resource(gvrHelloWorld).Namespace(ns)
	var pod *corev1.Pod
	children := func(ctx context.Context, greeting string) (bool, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "your-name", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "your-name", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		parent, err := hw.Get(ctx, "your-name", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		g, _, _ := unstructured.NestedString(parent.Object, "status", "greeting")
		ref := metav1.GetControllerOf(p)
		pod = p
		ok := g == greeting && cm.Data["greeting"] == greeting && p.Annotations["greeting"] == greeting && p.DeletionTimestamp == nil &&
			ref != nil && ref.UID == parent.GetUID() && len(parent.GetFinalizers()) == 1
		return ok, fmt.Errorf("status %q, ConfigMap %q, Pod %q (owner %v), finalizers %v", g, cm.Data["greeting"], p.Annotations["greeting"], ref, parent.GetFinalizers())
	}
	step := func(name string, do func() error, done string, check func(ctx context.Context) (bool, error)) {
		t.Helper()
		e.atZero(t, "default", svc, name, do, done, check)
	}

	// The README's helloworld.yaml, in this run's namespace.
	step("HelloWorld created", func() error {
		_, err := e.c.Apply(ctx, "apiVersion: example.com/v1\nkind: HelloWorld\nmetadata: {name: your-name, namespace: "+ns+"}\nspec: {who: Your Name}\n")
		return err
	}, "the hook's Pod and ConfigMap, owned by the HelloWorld, its status and Metacontroller's finalizer", func(ctx context.Context) (bool, error) {
		return children(ctx, "Hello, Your Name!")
	})
	podUID := pod.UID
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "your-name", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	step("spec.who edited", func() error {
		_, err := hw.Patch(ctx, "your-name", types.MergePatchType, []byte(`{"spec":{"who":"opzero"}}`), metav1.PatchOptions{})
		return err
	}, "the ConfigMap updated in place (InPlace), the Pod recreated (Recreate)", func(ctx context.Context) (bool, error) {
		ok, err := children(ctx, "Hello, opzero!")
		if !ok {
			return false, err
		}
		now, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "your-name", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.UID != podUID && now.UID == cm.UID, fmt.Errorf("Pod %s (was %s), ConfigMap %s (was %s)", pod.UID, podUID, now.UID, cm.UID)
	})

	step("HelloWorld deleted", func() error { return hw.Delete(ctx, "your-name", metav1.DeleteOptions{}) },
		"the finalize hook called (the Python hook's log) and the HelloWorld gone", func(ctx context.Context) (bool, error) {
			_, err := hw.Get(ctx, "your-name", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("HelloWorld: %v", err)
			}
			logs := e.containerLogs(t, "default", hook, "user-container")
			return strings.Contains(logs, "POST /finalize"), fmt.Errorf("no POST /finalize in the hook's log:\n%s", logs)
		})
	t.Logf("the Python hook scaled to zero %s after its last call", e.waitZero(t, "default", hook).Round(time.Second))
}

// readManifestsExcept is ReadManifests of folder dir without the files
// named skip.
func readManifestsExcept(dir string, skip ...string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, en := range entries {
		if en.IsDir() || slices.Contains(skip, en.Name()) {
			continue
		}
		if ext := filepath.Ext(en.Name()); ext != ".yaml" && ext != ".yml" {
			continue
		}
		m, err := ReadManifests(filepath.Join(dir, en.Name()))
		if err != nil {
			return "", err
		}
		b.WriteString(m)
	}
	return b.String(), nil
}

// readyNamed waits until the objects names of gvr in ns have condition
// Ready True.
func (e *e2e) readyNamed(t *testing.T, ns string, gvr schema.GroupVersionResource, names ...string) {
	t.Helper()
	testkit.Eventually(t, 4*time.Minute, fmt.Sprintf("%s %v Ready in %s", gvr.Resource, names, ns), func(ctx context.Context) (bool, error) {
		var notReady []string
		for _, n := range names {
			o, err := e.dyn.Resource(gvr).Namespace(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				notReady = append(notReady, err.Error())
				continue
			}
			if s, reason := condition(o, "Ready"); s != "True" {
				notReady = append(notReady, fmt.Sprintf("%s: %s %s", n, s, reason))
			}
		}
		return len(notReady) == 0, fmt.Errorf("not Ready: %s", strings.Join(notReady, "; "))
	})
}

// containerLogs returns container's log of every running pod of Knative
// Service svc.
func (e *e2e) containerLogs(t *testing.T, ns, svc, container string) string {
	t.Helper()
	pods, err := e.servicePods(context.Background(), ns, svc)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pods {
		out, err := e.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
		if err != nil {
			t.Logf("logs of %s: %v", p.Name, err)
		}
		b.Write(out)
	}
	return b.String()
}
