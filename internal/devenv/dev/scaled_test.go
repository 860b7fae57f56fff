package dev_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestDeletedDeploymentStopsItsProcess: a Deployment dev runs while it has
// replicas (here a local command, as a hook's) runs once scaled to 1, and
// its process is stopped when the Deployment is deleted, as a kubelet
// stops a deleted pod's: no process outlives its Deployment.
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
`))
	if err != nil {
		t.Fatal(err)
	}
	p, buf := startWithEvents(t, env, objs)
	ctx := context.Background()
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "hook"}, d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To(int32(1))
	if err := env.Client.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	var pid int
	testkit.Eventually(t, 30*time.Second, "the hook's process running once scaled to 1", func(context.Context) (bool, error) {
		pid = p.DeploymentPID(ns, "hook")
		return pid != 0, nil
	})
	if err := env.Client.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the process stopped once its Deployment is deleted", func(context.Context) (bool, error) {
		stopped := false
		for _, e := range buf.events(t) {
			if e.Event == dev.EventProcessStopped && e.PID == pid && e.Reason == "Deployment deleted" {
				stopped = true
			}
		}
		return stopped && syscall.Kill(pid, 0) != nil, nil
	})
}
