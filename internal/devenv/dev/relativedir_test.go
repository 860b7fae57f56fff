package dev_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestRelativeDirRunsInterpretedHook: with a relative log folder (opzero
// dev --log-dir logs), a hook Deployment run on its interpreter (a python
// image running a script of a ConfigMap, as Metacontroller publishes
// hooks) still runs its script. The script's path is rewritten to its copy
// under the log folder and the process runs in that copy's folder: a
// relative path was resolved from there again, and python found no script
// (webhook-auth, run as the book says, crash-looped so).
func TestRelativeDirRunsInterpretedHook(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	objs, err := dev.ReadManifests("-", strings.NewReader(`
apiVersion: v1
kind: ConfigMap
metadata: {name: hooks, namespace: `+ns+`}
data:
  sync.py: |
    import sys, time
    open(sys.argv[1], "w").write("ran")
    time.sleep(600)
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hook, namespace: `+ns+`}
spec:
  replicas: 1
  selector: {matchLabels: {app: hook}}
  template:
    metadata: {labels: {app: hook}}
    spec:
      containers:
      - name: hook
        image: python:3.11
        command: [python, /hooks/sync.py, `+marker+`]
        volumeMounts: [{name: hooks, mountPath: /hooks}]
      volumes: [{name: hooks, configMap: {name: hooks}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := dev.Start(ctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: "logs",
		CacheDir: cacheDir, BuildDir: root, Out: testkit.LogWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	testkit.Eventually(t, 30*time.Second, "the hook's script ran with a relative log folder", func(context.Context) (bool, error) {
		_, err := os.Stat(marker)
		return err == nil, nil
	})
}
