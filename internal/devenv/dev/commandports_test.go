package dev_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestLocalCommandsSharePort: two Deployments whose local commands
// (dev.opzero.dev/command) bind the same port, as two releases of one
// operator do with kubebuilder's --health-probe-bind-address=:8081, each
// in a pod of its own on a cluster: each gets a free local port in place
// of the one its livenessProbe names, both run and answer their probe,
// neither is restarted.
func TestLocalCommandsSharePort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts local processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	const server = `import sys, http.server; port = int(sys.argv[1].rsplit(":", 1)[1]); http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler).serve_forever()`
	deployment := func(name string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  annotations: {dev.opzero.dev/command: '["python3", "-c", "` + strings.ReplaceAll(server, `"`, `\"`) + `", "--health-probe-bind-address=:8081"]'}
spec:
  replicas: 1
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      containers:
      - name: manager
        image: controller:latest
        livenessProbe: {httpGet: {path: /, port: 8081}, periodSeconds: 1}
`
	}
	objs, err := dev.ReadManifests("-", strings.NewReader(deployment("one")+"---\n"+deployment("two")))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := startWithEvents(t, env, objs)
	addr := func(pid int) string {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return ""
		}
		for _, a := range strings.Split(string(cmdline), "\x00") {
			if v, ok := strings.CutPrefix(a, "--health-probe-bind-address="); ok {
				return v
			}
		}
		return ""
	}
	pids := map[string]int{}
	ports := map[string]string{}
	for _, name := range []string{"one", "two"} {
		testkit.Eventually(t, 30*time.Second, name+"'s process answering on its own port", func(ctx context.Context) (bool, error) {
			pid := p.DeploymentPID(ns, name)
			a := addr(pid)
			if pid == 0 || a == "" {
				return false, nil
			}
			if strings.HasSuffix(a, ":8081") {
				return false, fmt.Errorf("%s runs with --health-probe-bind-address=%s: want it moved off :8081", name, a)
			}
			resp, err := http.Get("http://127.0.0.1" + a[strings.LastIndex(a, ":"):] + "/")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			pids[name], ports[name] = pid, a
			return resp.StatusCode == http.StatusOK, nil
		})
	}
	if ports["one"] == ports["two"] {
		t.Fatalf("both processes given %s", ports["one"])
	}
	time.Sleep(5 * time.Second) // several probe periods
	for name, pid := range pids {
		if now := p.DeploymentPID(ns, name); now != pid {
			t.Errorf("%s restarted (pid %d, then %d): its probe or its port failed", name, pid, now)
		}
	}
}
