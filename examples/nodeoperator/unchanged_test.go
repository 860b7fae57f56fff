package nodeoperator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/opzero/opzero/examples/nodeoperator"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/proc"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/internal/unchanged"
	"github.com/opzero/opzero/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // the only test needs the control plane: do not start one
		os.Exit(m.Run())
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	os.Exit(testenv.Main(m, testenv.Options{Scheme: scheme}))
}

// TestUnchangedNodeOperatorOnTheHub: greeting-operator, a Node.js
// operator on @dot-i/k8s-operator (npm ci and its esbuild bundle, run
// here), is served at zero by the hub from its own release
// (deploy/install.yaml): `opzero hub adopt`'s derivation gives the
// Subscription, narrowed with --owner ConfigMap=Greeting. Through opzero
// dev, which runs `node` on the bundle while its Deployment has replicas:
// at zero no process runs; a Greeting created, updated, its ConfigMap
// edited, its ConfigMap deleted, and the Greeting deleted, each made at
// zero, each wakes it (the Subscription's wakes count goes up) and is
// reconciled by its initial list and watch, and it goes back to zero
// after each. It logs the operator's RSS while up against the hub's.
func TestUnchangedNodeOperatorOnTheHub(t *testing.T) {
	if testing.Short() {
		t.Skip("installs a Node.js operator's packages from npm and runs it unchanged through opzero dev and the hub")
	}
	node, _ := nodeoperator.Tools(t)
	buildDir, bundle := nodeoperator.Built(t)
	release := nodeoperator.Release(t)
	if bytes.Contains(release, []byte("opzero")) {
		t.Fatal("the release names opzero: it is not unchanged")
	}
	objs, err := dev.ReadManifests("-", bytes.NewReader(release))
	if err != nil {
		t.Fatal(err)
	}
	var maps []map[string]any
	for _, u := range objs {
		maps = append(maps, u.Object)
	}
	o := unchanged.Options{Owners: map[string]string{"ConfigMap": nodeoperator.Kind}, IdleAfter: 3 * time.Second}
	o.HubNamespace, o.HubName, o.AggregateLabel, o.WebhookToken = manifests.HubNamespace, manifests.HubName, manifests.HubAggregateLabel, "devtoken"
	r, err := unchanged.Derive(maps, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Notes {
		t.Logf("[%s] %s", n.Sure, n.Text)
	}
	if r.Namespace != nodeoperator.Namespace || r.Deployment != nodeoperator.Deployment {
		t.Fatalf("derived Deployment %s/%s, want the release's %s/%s", r.Namespace, r.Deployment, nodeoperator.Namespace, nodeoperator.Deployment)
	}
	if got := devtest.SubscribedKinds(r.Objects[0]); got != "ConfigMap(owner Greeting),Greeting" {
		t.Fatalf("derived resources %s, want Greeting and the ConfigMaps a Greeting owns", got)
	}

	// dev runs node on the bundle for the release's Deployment (its image,
	// ghcr.io/example/greeting-operator, is not here): the command the
	// Dockerfile's entrypoint is.
	for _, u := range objs {
		if u.GetKind() == "Deployment" {
			cmd, _ := json.Marshal([]string{node, bundle})
			u.SetAnnotations(map[string]string{"dev.opzero.dev/command": string(cmd)})
		}
	}
	extra := devtest.HubAndAdopted(t, r.Objects)
	env := testenv.Get(t)
	p := devtest.Start(t, context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: append(extra, objs...), Dir: t.TempDir(), CacheDir: t.TempDir(),
		BuildDir: buildDir})

	key := types.NamespacedName{Namespace: r.Namespace, Name: r.Deployment}
	var upRSS, upHWM float64
	wakes := int64(-1)
	atZero := func(step string) {
		t.Helper()
		if pid := p.DeploymentPID(key.Namespace, key.Name); pid != 0 { // up, having reconciled: what classic keeps on
			rss, hwm := proc.Mem(pid)
			upRSS, upHWM = max(upRSS, rss), max(upHWM, hwm)
		}
		testkit.Eventually(t, 90*time.Second, "the Node.js operator's Deployment back at 0 replicas, no process, after "+step, func(ctx context.Context) (bool, error) {
			var d appsv1.Deployment
			if err := env.Client.Get(ctx, key, &d); err != nil {
				return false, err
			}
			return d.Spec.Replicas != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0 && p.DeploymentPID(key.Namespace, key.Name) == 0, nil
		})
		sub := &unstructured.Unstructured{}
		sub.SetAPIVersion("opzero.dev/v1alpha1")
		sub.SetKind("Subscription")
		testkit.Eventually(t, 30*time.Second, "the Subscription's state Zero after "+step, func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, key, sub); err != nil {
				return false, err
			}
			state, _, _ := unstructured.NestedString(sub.Object, "status", "target", "state")
			return state == "Zero", nil
		})
		n, _, _ := unstructured.NestedInt64(sub.Object, "status", "target", "wakes")
		state, _, _ := unstructured.NestedString(sub.Object, "status", "target", "state")
		reason, _, _ := unstructured.NestedString(sub.Object, "status", "target", "lastWakeReason")
		t.Logf("at zero after %s: state %s, wakes %d (last: %s)", step, state, n, reason)
		if wakes >= 0 && n <= wakes {
			t.Fatalf("after %s: the Subscription's wakes %d, was %d: the change at zero did not wake the operator", step, n, wakes)
		}
		wakes = n
	}
	atZero("its start (nothing to reconcile)")
	nodeoperator.Exercise(t, env.Client, env.Namespace(t), atZero)

	hubRSS, _ := proc.Mem(p.DeploymentPID(manifests.HubNamespace, manifests.HubName))
	t.Logf("RSS under opzero dev: greeting-operator (node %s) up, having reconciled, %.1f MiB (peak %.1f MiB): what it keeps on classic; at zero no process (0 MiB); the hub serving it %.1f MiB (shared by every operator it serves)",
		strings.TrimSpace(nodeVersion(t, node)), upRSS, upHWM, hubRSS)
	if upRSS == 0 {
		t.Fatal("the operator's process was never seen up after a change")
	}
}

func nodeVersion(t *testing.T, node string) string {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
