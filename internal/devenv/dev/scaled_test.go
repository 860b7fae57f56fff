package dev_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestDeletedDeploymentStopsItsProcess: a Deployment dev runs while it has
// replicas (here a local command, as a hook's) runs once scaled to 1, and
// an always-on one (replicas 1) runs from the start; each process is
// stopped when its Deployment is deleted, as a kubelet stops a deleted
// pod's: no process outlives its Deployment.
func TestDeletedDeploymentStopsItsProcess(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	objs, err := dev.ReadManifests("-", strings.NewReader(`
apiVersion: apps/v1
kind: Deployment
metadata:
  name: hook
  namespace: `+ns+`
  annotations: {dev.opzero.dev/command: '["sleep", "600"]'}
spec:
  replicas: 0
  selector: {matchLabels: {app: hook}}
  template:
    metadata: {labels: {app: hook}}
    spec:
      containers: [{name: hook, image: python:3.12-slim}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: always
  namespace: `+ns+`
  annotations: {dev.opzero.dev/command: '["sleep", "600"]'}
spec:
  replicas: 1
  selector: {matchLabels: {app: always}}
  template:
    metadata: {labels: {app: always}}
    spec:
      containers: [{name: always, image: python:3.12-slim}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p, buf := startWithEvents(t, env, objs)
	ctx := context.Background()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"}}
	if err := env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))); err != nil {
		t.Fatal(err)
	}
	var pid int
	testkit.Eventually(t, 30*time.Second, "the hook's process running once scaled to 1", func(context.Context) (bool, error) {
		pid = p.DeploymentPID(ns, "hook")
		return pid != 0, nil
	})
	always := p.DeploymentPID(ns, "always")
	if always == 0 {
		t.Fatal("the always-on Deployment's process is not running")
	}
	for name, pid := range map[string]int{"hook": pid, "always": always} {
		if err := env.Client.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, "the process of "+name+" stopped once its Deployment is deleted", func(context.Context) (bool, error) {
			stopped := false
			for _, e := range buf.events(t) {
				if e.Event == dev.EventProcessStopped && e.PID == pid && e.Reason == "Deployment deleted" {
					stopped = true
				}
			}
			return stopped && syscall.Kill(pid, 0) != nil, nil
		})
	}
}
