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
// (dev.opzero.dev/command) bind the same ports, as two releases of one
// kubebuilder operator do with --health-probe-bind-address=:8081 and
// --metrics-bind-address=:8443, each in a pod of its own on a cluster:
// the first keeps them, the second gets free local ports in place of the
// one its livenessProbe names and the one its metrics Service targets;
// both run and answer their probe, neither is restarted.
func TestLocalCommandsSharePort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts local processes")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	// serves on the port of each argument, as a manager its probes and metrics
	const server = `import sys, threading, http.server
for a in sys.argv[1:]: threading.Thread(target=http.server.HTTPServer(("127.0.0.1", int(a.rsplit(":", 1)[1])), http.server.SimpleHTTPRequestHandler).serve_forever).start()`
	deployment := func(name string) string {
		return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ` + name + `
  namespace: ` + ns + `
  annotations: {dev.opzero.dev/command: '["python3", "-c", "` + strings.NewReplacer(`"`, `\"`, "\n", `\n`).Replace(server) + `", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443"]'}
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
---
apiVersion: v1
kind: Service
metadata:
  name: ` + name + `-metrics
  namespace: ` + ns + `
spec:
  selector: {app: ` + name + `}
  ports: [{port: 8443, targetPort: 8443}]
`
	}
	objs, err := dev.ReadManifests("-", strings.NewReader(deployment("one")+"---\n"+deployment("two")))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := startWithEvents(t, env, objs)
	addr := func(pid int, flag string) string {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return ""
		}
		for _, a := range strings.Split(string(cmdline), "\x00") {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return ""
	}
	pids := map[string]int{}
	ports := map[string]bool{}
	for _, name := range []string{"one", "two"} {
		for flag, port := range map[string]string{"--health-probe-bind-address": ":8081", "--metrics-bind-address": ":8443"} {
			testkit.Eventually(t, 30*time.Second, name+"'s "+flag+" answering on a port of its own", func(ctx context.Context) (bool, error) {
				pid := p.DeploymentPID(ns, name)
				a := addr(pid, flag)
				if pid == 0 || a == "" {
					return false, nil
				}
				if name == "two" && strings.HasSuffix(a, port) {
					return false, fmt.Errorf("%s runs with %s=%s: want it moved off %s, which one binds", name, flag, a, port)
				}
				resp, err := http.Get("http://127.0.0.1" + a[strings.LastIndex(a, ":"):] + "/")
				if err != nil {
					return false, nil
				}
				resp.Body.Close()
				pids[name] = pid
				if resp.StatusCode == http.StatusOK {
					if ports[a] {
						return false, fmt.Errorf("%s given %s, a port already given", name, a)
					}
					ports[a] = true
				}
				return resp.StatusCode == http.StatusOK, nil
			})
		}
	}
	time.Sleep(5 * time.Second) // several probe periods
	for name, pid := range pids {
		if now := p.DeploymentPID(ns, name); now != pid {
			t.Errorf("%s restarted (pid %d, then %d): its probe or its port failed", name, pid, now)
		}
	}
}
