package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/examples/nodeoperator"
)

// unchangedNode is a Node.js operator on the real node: greeting-operator
// (examples/nodeoperator, @dot-i/k8s-operator; npm ci and its esbuild
// bundle run here) in an image of the local node and the bundle (as
// CommandImage builds one), installed from its own release
// (deploy/install.yaml, its image and namespace replaced) and run classic
// first: its working set. Then served at zero by the hub with `opzero hub
// adopt --owner ConfigMap=Greeting`: a Greeting created, updated, its
// ConfigMap edited, its ConfigMap deleted and the Greeting deleted, each
// made at zero, each reconciled by the woken pod, which goes back to zero.
func (e *e2e) unchangedNode(t *testing.T) {
	e.installHub(t)
	release := e.nodeRelease(t, e.namespace(t, "e2e-unchanged-node"))
	ns := release.ns

	// Classic, as released: 1 replica, its watches started.
	e.waitAvailable(t, ns, release.deployment)
	settled(20 * time.Second)
	classic := e.memory(t, map[string][]string{ns: {release.deployment}})
	if len(classic) != 1 {
		t.Fatalf("kubelet's summary has %d pods of %s/%s, want its one", len(classic), ns, release.deployment)
	}
	e.logFleet(t, "greeting-operator (Node.js, @dot-i/k8s-operator), classic (1 replica, as released)", classic)

	e.adopt(t, release, true, "--owner", "ConfigMap=Greeting", "--watch-namespace", ns, "--idle-after", "5s")
	e.ready(t, ns, gvrSubscription, 1)
	e.deploymentAtZero(t, ns, release.deployment)
	if left := e.memory(t, map[string][]string{ns: {release.deployment}}); len(left) != 0 {
		t.Fatalf("at zero, kubelet still has %d pods of %s", len(left), release.deployment)
	}

	c, err := client.New(e.c.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	nodeoperator.Exercise(t, c, ns, func(step string) {
		reconciled := time.Since(t0)
		back := e.deploymentAtZero(t, ns, release.deployment)
		e.figure(t, "real node, greeting-operator (Node.js) unchanged at zero: %s at zero -> reconciled %s; back at zero %s after",
			step, reconciled.Round(time.Millisecond), back.Round(time.Second))
		t0 = time.Now()
	})
	t.Logf("its Subscription: %s", e.targetStatus(t, ns))
}

// nodeRelease builds greeting-operator's image (examples/nodeoperator: npm
// ci, its esbuild bundle, the local node) and installs its release in ns:
// CRD, RBAC and its Deployment, classic as released.
func (e *e2e) nodeRelease(t *testing.T, ns string) release {
	t.Helper()
	ctx := context.Background()
	dir, bundle := nodeoperator.Built(t)
	rel, err := filepath.Rel(dir, bundle)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := CommandImage(ctx, dir, "greeting-operator", []string{"node", rel})
	if err != nil {
		t.Fatal(err)
	}
	built, err := e.c.Import(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	y := string(nodeoperator.Release(t))
	r := strings.ReplaceAll(y, "image: ghcr.io/example/greeting-operator:0.1.0", "image: "+built[0].Ref)
	if r == y {
		t.Fatal("the release names no image ghcr.io/example/greeting-operator:0.1.0")
	}
	r = strings.ReplaceAll(r, nodeoperator.Namespace, ns)
	release := release{ns: ns, file: filepath.Join(t.TempDir(), "install.yaml"), deployment: nodeoperator.Deployment}
	if err := os.WriteFile(release.file, []byte(r), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // its cluster-scoped objects (the namespace goes with e.namespace)
		e.c.kubectl(context.Background(), "", "delete", "clusterrole,clusterrolebinding", "-l", "opzero-e2e-release=greeting", "--ignore-not-found")
		e.c.kubectl(context.Background(), "", "delete", "crd", "greetings.hello.example.com", "--ignore-not-found")
	})
	if out, err := e.c.Apply(ctx, labelClusterScoped(r, "opzero-e2e-release", "greeting", map[string]bool{"Namespace": true})); err != nil {
		t.Fatalf("applying the release in %s: %v\n%s", ns, err, out)
	}
	return release
}
