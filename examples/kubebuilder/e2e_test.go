package kubebuilder_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/testkit"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/examples/kubebuilder/kbproject"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the only test needs the control plane: do not start one
		os.Exit(m.Run())
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{KnativeCRDs: true, Scheme: scheme}))
}

// The project's generation lives in kbproject, which the real-Knative
// suite (internal/devenv/cluster) shares.
func checkoutRoot(t *testing.T) string { return kbproject.CheckoutRoot(t) }
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	return kbproject.Run(t, dir, name, args...)
}
func tools(t *testing.T) (kubebuilder, controllerGen string) { return kbproject.Tools(t) }
func project(t *testing.T) (dir, diff string)                { return kbproject.Adopted(t) }
func generated(t *testing.T) (dir string, mainBefore []byte) { return kbproject.Generated(t) }
func replaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	kbproject.ReplaceIn(t, path, old, new)
}

// TestKubebuilderProjectAdopted is the proof: a project generated
// by kubebuilder, with only cmd/main.go changed, runs serverless through
// opzero dev (Knative's ApiServerSource adapter, scale to zero) and classic.
func TestKubebuilderProjectAdopted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kubebuilder, generates a project and runs it on a control plane with Knative's adapters")
	}
	dir, numstat := project(t)
	var added, deleted int
	fmt.Sscan(numstat, &added, &deleted)
	t.Logf("cmd/main.go migration: %d lines added, %d deleted (%d changed lines)", added, deleted, added+deleted)
	if added == 0 || added+deleted > 10 {
		t.Fatalf("the migration diff is %q: want a few lines", numstat)
	}
	env := testenv.Get(t)
	t.Run("flags", func(t *testing.T) { oneFlagPerSetting(t, dir) })
	t.Run("config", func(t *testing.T) { fromConfig(t, env, dir) })
	t.Run("serverless", func(t *testing.T) { serverless(t, env, dir) })
	t.Run("classic", func(t *testing.T) {
		classic(t, env, dir, func(t *testing.T, c client.Client, ns string) { exercise(t, c, ns, nil) })
	})
}

// oneFlagPerSetting: the adopted binary's -h lists the project's own
// metrics, probe and leader-election flags and opzero's --mode, and none of
// opzero's flags for the same settings.
func oneFlagPerSetting(t *testing.T, dir string) {
	bin := filepath.Join(t.TempDir(), "memcached")
	run(t, dir, "go", "build", "-o", bin, "./cmd")
	out, _ := exec.Command(bin, "-h").CombinedOutput() // exit 0 or 2, as the flag package has it
	flags := map[string]bool{}
	// a flag's line, in pflag's form (opzero's help: "      --name type")
	// or the flag package's ("  -name type")
	flagLine := regexp.MustCompile(`^(?:  -[a-zA-Z], |      )--([a-z0-9-]+)|^  -([a-z][a-z0-9-]*)`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags[m[1]+m[2]] = true
		}
	}
	for _, want := range []string{"metrics-bind-address", "health-probe-bind-address", "leader-elect", "mode", "audience"} {
		if !flags[want] {
			t.Errorf("-h has no -%s:\n%s", want, out)
		}
	}
	for _, dup := range []string{"metrics-addr", "health-addr", "health-probe-addr", "disable-leader-election", "leader-election-namespace"} {
		if flags[dup] {
			t.Errorf("-h lists opzero's -%s next to the project's own flag for it", dup)
		}
	}
}

func serverless(t *testing.T, env *testenv.Env, dir string) {
	ns := env.Namespace(t)
	us := devObjects(t, dir, manifests.Options{Namespace: ns, Source: manifests.SourceKnative})
	var sources []string
	for _, o := range us {
		if o.GetKind() == "ApiServerSource" {
			res, _, _ := unstructured.NestedSlice(o.Object, "spec", "resources")
			for _, r := range res {
				m, _ := r.(map[string]any)
				sources = append(sources, fmt.Sprint(m["kind"]))
			}
		}
	}
	if got := strings.Join(sources, ","); got != "Deployment,Memcached" {
		t.Fatalf("ApiServerSources for %s, want Deployment (owned) and Memcached (For)", got)
	}
	p := devtest.Start(t, context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: t.TempDir(),
		BuildDir: dir, Idle: time.Second})
	exercise(t, env.Client, ns, idleWait(t, p))
}

// devObjects are the manifests `opzero manifests` writes for the project
// in dir (./cmd), as opzero dev reads them, with the sweeps (PingSources, or the Subscription's)
// moved out of the way (no sweep tick during the test).
func devObjects(t *testing.T, dir string, o manifests.Options) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Build(context.Background(), dir, "./cmd", o)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(objs)
	if err != nil {
		t.Fatal(err)
	}
	us, err := dev.ReadManifests("-", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	noSweeps(us)
	return us
}

// noSweeps moves the sweeps (PingSources, or the Subscription's) out of
// the way: no sweep tick during a test.
func noSweeps(us []*unstructured.Unstructured) {
	for _, u := range us {
		switch u.GetKind() {
		case "PingSource":
			_ = unstructured.SetNestedField(u.Object, "0 0 1 1 *", "spec", "schedule")
		case "Subscription":
			sweeps, _, _ := unstructured.NestedSlice(u.Object, "spec", "sweeps")
			for _, sw := range sweeps {
				sw.(map[string]any)["schedule"] = "0 0 1 1 *"
			}
			_ = unstructured.SetNestedSlice(u.Object, sweeps, "spec", "sweeps")
		}
	}
}

// configImage is the image the project's config/manager/manager.yaml
// gives its reconciler (MEMCACHED_IMAGE): no kubelet runs it here.
const configImage = "registry.example.com/memcached:from-config"

// fromConfig: a variable declared only in the project's
// config/manager/manager.yaml (MEMCACHED_IMAGE) reaches both outputs of
// opzero manifests, with config/default's namePrefix and kubebuilder's
// resources and securityContext; the serverless output written as an
// overlay under config/ runs from its kustomization (opzero dev -k
// config/serverless), and the Deployment the reconciler makes has the
// image the variable names.
func fromConfig(t *testing.T, env *testenv.Env, dir string) {
	kbproject.ManagerEnv(t, dir, "MEMCACHED_IMAGE", configImage)
	ns := env.Namespace(t)
	cfg := manifests.ConfigDir(dir)
	if cfg != filepath.Join(dir, "config", "default") {
		t.Fatalf("config dir %q", cfg)
	}
	project, err := manifests.ReadProject(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("config/default: Deployment %s, namespace %s, namePrefix %s, %d env", project.Deployment, project.Namespace, project.NamePrefix, len(project.Env))
	built := map[string][]manifests.Object{}
	for _, mode := range []string{manifests.Serverless, manifests.Classic} {
		objs, err := manifests.Build(context.Background(), dir, "./cmd", manifests.Options{Mode: mode, Namespace: ns, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		built[mode] = objs
		var found bool
		for _, o := range objs {
			if o.File != manifests.FileOperator || o.Kind() != map[string]string{manifests.Serverless: "Service", manifests.Classic: "Deployment"}[mode] {
				continue
			}
			found = true
			if o.Name() != "memcached" {
				t.Errorf("%s: %s %s, want memcached (config/default's namePrefix memcached- is the project's name: not repeated)", mode, o.Kind(), o.Name())
			}
			cs, _, _ := unstructured.NestedSlice(o.Obj, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			var image any
			for _, e := range c["env"].([]any) {
				if e := e.(map[string]any); e["name"] == "MEMCACHED_IMAGE" {
					image = e["value"]
				}
			}
			if image != configImage || c["resources"] == nil || c["securityContext"] == nil {
				t.Errorf("%s: MEMCACHED_IMAGE %v, resources %v, securityContext %v: want config/manager/manager.yaml's", mode, image, c["resources"], c["securityContext"])
			}
		}
		if !found {
			t.Fatalf("%s: no operator object", mode)
		}
	}
	overlay := filepath.Join(dir, "config", "serverless")
	if err := manifests.WriteOverlay(overlay, built[manifests.Serverless]); err != nil {
		t.Fatal(err)
	}
	us, err := dev.ReadKustomization(overlay)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := manifests.Stream(built[manifests.Serverless])
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := dev.ReadManifests("-", bytes.NewReader(stream)); len(us) != len(want) {
		t.Fatalf("config/serverless renders %d objects, opzero manifests made %d", len(us), len(want))
	}
	noSweeps(us)
	devtest.Start(t, context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: t.TempDir(), BuildDir: dir})
	c := env.Client
	m := memcached(ns, "cache", 1)
	if err := c.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	testkit.Eventually(t, 60*time.Second, "the reconciler's Deployment with config/'s MEMCACHED_IMAGE", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(m), dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return dep.Spec.Template.Spec.Containers[0].Image == configImage, nil
	})
	if err := c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the Memcached deleted (its finalizer ran)", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(m), m)), nil
	})
}

// idleWait returns a wait for the platform's (one) Knative Service to
// scale to zero, after the step it names.
func idleWait(t *testing.T, p *dev.Platform) func(step string) {
	return func(step string) {
		testkit.Eventually(t, 60*time.Second, "scale to zero after "+step, func(context.Context) (bool, error) {
			return p.Services[0].Activator.Instances() == 0, nil
		})
	}
}

// classic runs the generated classic manifests through opzero dev and
// exercise on them: the Deployment passes the project's own --leader-elect
// and --health-probe-bind-address (opzero dev probes it), and the manager
// holds its leader-election Lease in the namespace.
func classic(t *testing.T, env *testenv.Env, dir string, exercise func(t *testing.T, c client.Client, ns string)) {
	ns := env.Namespace(t)
	us := devObjects(t, dir, manifests.Options{Namespace: ns, Mode: manifests.Classic})
	for _, o := range us {
		if o.GetKind() == "Deployment" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
			t.Logf("classic Deployment %s args: %s", o.GetName(), strings.Join(args, " "))
			if !slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--health-probe-bind-address=:8081") {
				t.Fatalf("classic Deployment args %q: want the project's --leader-elect and --health-probe-bind-address", args)
			}
		}
	}
	devtest.Start(t, context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: t.TempDir(), BuildDir: dir})
	exercise(t, env.Client, ns)
	leases := &coordinationv1.LeaseList{}
	if err := env.Client.List(context.Background(), leases, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			held = append(held, l.Name+" held by "+*l.Spec.HolderIdentity)
		}
	}
	t.Logf("leader election: %v", held)
	if len(held) != 1 {
		t.Fatalf("leases held in %s: %v, want the manager's one", ns, held)
	}
}

var memcachedGVK = metav1.GroupVersionKind{Group: "cache.example.com", Version: "v1alpha1", Kind: "Memcached"}

func memcached(ns, name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(memcachedGVK.Group + "/" + memcachedGVK.Version)
	u.SetKind(memcachedGVK.Kind)
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, size, "spec", "size")
	return u
}

// exercise takes a Memcached through create, update, a deleted dependent
// and deletion; idle (serverless) waits for scale to zero between steps.
func exercise(t *testing.T, c client.Client, ns string, idle func(step string)) {
	ctx := context.Background()
	if idle == nil {
		idle = func(string) {}
	}
	m := memcached(ns, "cache", 1)
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(m)
	dep := &appsv1.Deployment{}
	testkit.Eventually(t, 60*time.Second, "Deployment with 1 replica, finalizer, Available=True, Event Created", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if err := c.Get(ctx, key, m); err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(dep)
		return ref != nil && ref.Kind == "Memcached" && ref.Name == "cache" && *dep.Spec.Replicas == 1 &&
			hasFinalizer(m) && available(m) && hasEvent(ctx, t, c, ns, "Created"), nil
	})
	idle("create")

	_ = unstructured.SetNestedField(m.Object, int64(3), "spec", "size")
	if err := c.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "Deployment scaled to 3, Event Scaled", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, dep); err != nil {
			return false, err
		}
		return *dep.Spec.Replicas == 3 && hasEvent(ctx, t, c, ns, "Scaled"), nil
	})
	idle("update")

	old := dep.UID
	if err := c.Delete(ctx, dep); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the deleted Deployment recreated (its owner reconciled on the dependent's delete event)", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, dep)
		return err == nil && dep.UID != old && dep.DeletionTimestamp == nil, client.IgnoreNotFound(err)
	})
	idle("dependent deleted")

	if err := c.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "finalizer ran (Event Deleting) and the Memcached is gone", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, memcached(ns, "cache", 0))
		return apierrors.IsNotFound(err) && hasEvent(ctx, t, c, ns, "Deleting"), nil
	})
	idle("delete")
}

func hasFinalizer(m *unstructured.Unstructured) bool {
	for _, f := range m.GetFinalizers() {
		if f == "cache.example.com/finalizer" {
			return true
		}
	}
	return false
}

func available(m *unstructured.Unstructured) bool {
	raw, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
	b, _ := json.Marshal(raw)
	var conds []metav1.Condition
	_ = json.Unmarshal(b, &conds)
	return meta.IsStatusConditionTrue(conds, "Available")
}

func hasEvent(ctx context.Context, t *testing.T, c client.Client, ns, reason string) bool {
	evs := &corev1.EventList{}
	if err := c.List(ctx, evs, client.InNamespace(ns)); err != nil {
		t.Logf("listing Events: %v", err)
		return false
	}
	for _, e := range evs.Items {
		if e.Reason == reason && e.InvolvedObject.Kind == "Memcached" && e.InvolvedObject.Name == "cache" {
			return true
		}
	}
	return false
}

// TestReadmeAdoptProject runs the README's commands for adopting a project
// exactly as written, as a new user would in a folder outside the checkout:
// install the CLI and opzero's programs, then in a kubebuilder project whose
// cmd/main.go is changed as docs/migrating.md shows, require opzero, build,
// run the project's own envtest suite on opzero's pinned binaries, write
// both modes' manifests and run opzero dev until it is ready, then Ctrl-C.
func TestReadmeAdoptProject(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kubebuilder and a project, runs its envtest suite and opzero dev")
	}
	root := checkoutRoot(t)
	env := testkit.ReadmeEnv(t, root)
	dir, _ := generated(t)
	if strings.HasPrefix(dir, root+string(filepath.Separator)) {
		t.Fatalf("the project %s is inside the checkout %s", dir, root)
	}
	for _, block := range []string{"install", "adopt"} {
		lines, err := testkit.BookBlock(root, block)
		if err != nil {
			t.Fatal(err)
		}
		out := testkit.RunReadme(t, dir, env, "opzero dev: ready", lines)
		t.Logf("README %s:\n%s", block, testkit.Tail([]byte(out), 40))
		if block == "adopt" {
			keptVersions(t, dir)
			if !regexp.MustCompile(`(?m)^ok\s+example.com/memcached/internal/controller\s`).MatchString(out) {
				t.Errorf("the project's envtest suite did not run:\n%s", out)
			}
			for _, f := range []string{"config/serverless/operator.yaml", "config/serverless/sources.yaml", "config/serverless/namespace.yaml",
				"config/serverless/kustomization.yaml", "config/classic/operator.yaml", "config/classic/kustomization.yaml"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("opzero manifests did not write %s: %v", f, err)
				}
			}
			// config/default's namespace and namePrefix, read by opzero manifests
			if b, _ := os.ReadFile(filepath.Join(dir, "config/serverless/operator.yaml")); !bytes.Contains(b, []byte("name: memcached\n  namespace: memcached-system\n")) {
				t.Errorf("config/serverless/operator.yaml is not config/default's memcached in memcached-system:\n%s", b)
			}
		}
	}
}
