package dev_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// rolledOut is what `kubectl rollout status` waits for: the controller saw
// the latest spec, every replica is updated and available, no old one is
// left.
func rolledOut(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	why := fmt.Sprintf("generation %d observed %d, replicas %d updated %d available %d", d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want, why
}

// TestAlwaysOnDeploymentBecomesAvailable: a hook's Deployment that dev
// runs as one local process becomes Available as on a cluster (its pod
// marked Ready while the process runs; kube-controller-manager writes the
// Deployment's status), so `kubectl rollout status` completes, and again
// after a rollout of a new template. Failure path: a Deployment whose
// process keeps exiting never counts an available replica.
func TestAlwaysOnDeploymentBecomesAvailable(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	deployment := func(name, command string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  annotations: {dev.opzero.dev/command: '` + command + `'}
spec:
  replicas: 1
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      containers: [{name: hook, image: python:3.12-slim}]
`
	}
	objs, err := dev.ReadManifests("-", strings.NewReader(deployment("hook", `["sleep", "600"]`)+"---\n"+deployment("crashing", `["sh", "-c", "exit 1"]`)))
	if err != nil {
		t.Fatal(err)
	}
	startWithEvents(t, env, objs)
	ctx := context.Background()
	available := func(what string) {
		var why string
		testkit.Eventually(t, 60*time.Second, what, func(ctx context.Context) (bool, error) {
			d := &appsv1.Deployment{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hook"}, d); err != nil {
				return false, err
			}
			var ok bool
			ok, why = rolledOut(d)
			return ok, nil
		})
		t.Logf("%s: %s", what, why)
	}
	available("the hook's Deployment rolled out and available while its process runs")

	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"}}
	if err := env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"rev":"2"}}}}}`))); err != nil {
		t.Fatal(err)
	}
	available("the rollout of a new template complete")
	pods := &corev1.PodList{}
	if err := env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "hook"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Annotations["rev"] != "2" {
			t.Errorf("pod %s of the old template left after the rollout", p.Name)
		}
	}

	// its process exits every time: never available
	time.Sleep(8 * time.Second) // several restarts
	c := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "crashing"}, c); err != nil {
		t.Fatal(err)
	}
	if c.Status.AvailableReplicas != 0 || c.Status.ReadyReplicas != 0 {
		t.Fatalf("a Deployment whose process keeps exiting counts %d available, %d ready replicas", c.Status.AvailableReplicas, c.Status.ReadyReplicas)
	}
}
