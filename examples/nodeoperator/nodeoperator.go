package nodeoperator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/testkit"
)

// The release's names (deploy/install.yaml).
const (
	Namespace  = "greeting-system"
	Deployment = "greeting-operator"
	Group      = "hello.example.com"
	Version    = "v1"
	Kind       = "Greeting"
	Finalizer  = "greetings.hello.example.com/configmap"
)

// Dir is the example's folder in the checkout.
func Dir(t testing.TB) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "examples", "nodeoperator")
}

// Release is deploy/install.yaml.
func Release(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(t), "deploy", "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Tools are node and npm, or the test is skipped saying which is missing.
func Tools(t testing.TB) (node, npm string) {
	t.Helper()
	var missing []string
	look := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		return p
	}
	node, npm = look("node"), look("npm")
	if len(missing) > 0 {
		t.Skipf("the Node.js operator needs %s on $PATH (Debian: apt-get install nodejs npm), to install its packages from the npm registry and run it", strings.Join(missing, " and "))
	}
	return node, npm
}

// Built copies the operator's source (operator.js, package.json,
// package-lock.json) into a temporary folder, installs its packages there
// (npm ci: the lock file's exact versions, from the npm registry) and
// bundles it (npm run bundle: esbuild), and returns the folder and the
// bundle's path in it (dist/operator.js: one file, no node_modules
// needed). It skips the test when node or npm is missing.
func Built(t testing.TB) (dir, bundle string) {
	t.Helper()
	_, npm := Tools(t)
	dir = t.TempDir()
	for _, f := range []string{"operator.js", "package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(Dir(t), "operator", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund", "--prefer-offline"}, {"run", "bundle"}} {
		cmd := exec.Command(npm, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
		}
	}
	bundle = filepath.Join(dir, "dist", "operator.js")
	st, err := os.Stat(bundle)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("greeting-operator: npm ci and its esbuild bundle in %s (%s, %.1f MB)", time.Since(start).Round(time.Second), bundle, float64(st.Size())/1e6)
	return dir, bundle
}

// Greeting is a Greeting of ns/name greeting to.
func Greeting(ns, name, to string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, to, "spec", "to")
	return u
}

// Exercise takes a Greeting through create, update, its ConfigMap edited,
// its ConfigMap deleted and its own delete, each made while the operator
// is at zero; after each it waits for the operator's reconcile (the
// ConfigMap as it should be, the status at the generation, the finalizer
// run) and calls atZero, which waits for the operator to be back at zero.
func Exercise(t *testing.T, c client.Client, ns string, atZero func(step string)) {
	t.Helper()
	ctx := context.Background()
	g := Greeting(ns, "hello", "world")
	key := client.ObjectKey{Namespace: ns, Name: "hello-greeting"}
	cm := &corev1.ConfigMap{}
	reconciled := func(step, want string) {
		t.Helper()
		testkit.Eventually(t, 90*time.Second, fmt.Sprintf("after %s: ConfigMap %s holding %q, owned by the Greeting; its status at its generation; its finalizer", step, key, want), func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
				return false, err
			}
			if err := c.Get(ctx, key, cm); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			ref := metav1.GetControllerOf(cm)
			gen, _, _ := unstructured.NestedInt64(g.Object, "status", "observedGeneration")
			said, _, _ := unstructured.NestedString(g.Object, "status", "greeting")
			return cm.Data["greeting"] == want && ref != nil && ref.Kind == Kind && ref.UID == g.GetUID() &&
				gen == g.GetGeneration() && said == want && slices.Contains(g.GetFinalizers(), Finalizer), nil
		})
	}

	if err := c.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	reconciled("create", "Hello, world!")
	atZero("create")

	_ = unstructured.SetNestedField(g.Object, "opzero", "spec", "to")
	if err := c.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	reconciled("update", "Hello, opzero!")
	atZero("update")

	cm.Data["greeting"] = "tampered"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	reconciled("its ConfigMap edited", "Hello, opzero!")
	atZero("its ConfigMap edited")

	old := cm.UID
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	reconciled("its ConfigMap deleted", "Hello, opzero!")
	if cm.UID == old {
		t.Fatalf("the ConfigMap's UID is still %s: not recreated", old)
	}
	atZero("its ConfigMap deleted")

	if err := c.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "the Greeting gone (the operator's finalizer ran) and its ConfigMap with it", func(ctx context.Context) (bool, error) {
		gone := apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(g), Greeting(ns, "hello", "")))
		cmGone := apierrors.IsNotFound(c.Get(ctx, key, &corev1.ConfigMap{}))
		return gone && cmGone, nil
	})
	atZero("delete")
}
