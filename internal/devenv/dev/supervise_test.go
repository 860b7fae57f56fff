package dev_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// restartedEvent waits for a process-restarted event of what after the
// first n events and returns it with the index after it.
func restartedEvent(t *testing.T, buf *syncBuffer, what string, from int) (dev.Event, int) {
	t.Helper()
	var got dev.Event
	next := 0
	testkit.Eventually(t, time.Minute, what+" restarted", func(context.Context) (bool, error) {
		evs := buf.events(t)
		for i := from; i < len(evs); i++ {
			if evs[i].Event == dev.EventProcessRestarted && evs[i].Process == what {
				got, next = evs[i], i+1
				return true, nil
			}
		}
		return false, nil
	})
	return got, next
}

// TestAdaptersAreSupervised plays kubelet's part for Knative's adapter: a
// hung adapter (SIGSTOP) fails its liveness probe (its metrics endpoint)
// and is restarted; a ConfigWatcher created while it hung reaches the
// operator only through the sweep tick dev sends after the restart (the
// new adapter sends nothing for what it lists). An adapter killed with
// SIGKILL is restarted too; each restart is a line and an event.
func TestAdaptersAreSupervised(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Knative's adapters")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	c := env.Client
	createWebapp(t, c, ns)
	p, buf := startWithEvents(t, env, fixture(t, ns))
	what := "ApiServerSource " + ns + "/configwatcher"
	pid := p.SourcePIDs()[what]
	if pid == 0 {
		t.Fatalf("no pid for %s in %v", what, p.SourcePIDs())
	}

	// Hung: the probe fails, dev restarts it and sweeps.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cw := &v1.ConfigWatcher{ObjectMeta: metav1.ObjectMeta{Name: "webapp-config-watcher", Namespace: ns},
		Spec: v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}}
	if err := c.Create(context.Background(), cw); err != nil {
		t.Fatal(err)
	}
	ev, next := restartedEvent(t, buf, what, 0)
	if !strings.Contains(ev.Reason, "liveness probe failed") || ev.PID == pid || ev.PID == 0 {
		t.Fatalf("restart of a hung adapter: %+v, want a liveness probe reason and a new pid (old %d)", ev, pid)
	}
	if !gone(pid) {
		t.Fatalf("the hung adapter pid %d still runs", pid)
	}
	testkit.Eventually(t, time.Minute, "ConfigWatcher created during the hang reconciled (by the sweep)", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKeyFromObject(cw), cw) == nil && cw.Status.ConfigMapVersion != "", nil
	})
	// The sweep's answer (and so its event) comes after the reconcile it
	// caused has written the status.
	testkit.Eventually(t, time.Minute, "a 2xx sweep event for "+what+" after its restart", func(context.Context) (bool, error) {
		for _, e := range buf.events(t) {
			if e.Event == dev.EventSweep && e.Process == what && e.Code/100 == 2 {
				return true, nil
			}
		}
		return false, nil
	})

	// Killed: restarted, and events flow through the new adapter.
	pid = p.SourcePIDs()[what]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev, _ = restartedEvent(t, buf, what, next)
	if !strings.Contains(ev.Reason, "exited") || ev.PID == pid {
		t.Fatalf("restart of a killed adapter: %+v, want 'exited' and a new pid (old %d)", ev, pid)
	}
	testkit.Eventually(t, time.Minute, "the new adapter running", func(context.Context) (bool, error) {
		return p.SourcePIDs()[what] == ev.PID, nil
	})
}

// TestAlwaysOnSupervised: what stays on while the operator is at zero runs
// with its livenessProbe played on 127.0.0.1 (it answers /healthz), and a
// SIGKILL gets it restarted, with an event: the wakeup source of
// `opzero manifests --source=knative`, and the hub of the default wiring.
func TestAlwaysOnSupervised(t *testing.T) {
	if testing.Short() {
		t.Skip("starts always-on processes")
	}
	for _, tc := range []struct {
		name   string
		source string
		what   func(ns string) string
	}{
		{"knative wakeup source", manifests.SourceKnative, func(ns string) string { return "Deployment " + ns + "/configwatcher-wakeup-source" }},
		{"hub", "", func(string) string { return "Deployment opzero-system/opzero-hub" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Get(t)
			ns := env.Namespace(t)
			p, buf := startWithEvents(t, env, generatedWith(t, ns, tc.source))
			what := tc.what(ns)
			pid := p.SourcePIDs()[what]
			if pid == 0 {
				t.Fatalf("no pid for %s in %v", what, p.SourcePIDs())
			}
			// Its --health-addr=:8081 runs on a port of its own (processes
			// share one network here).
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				t.Fatal(err)
			}
			addr := ""
			for _, a := range strings.Split(string(cmdline), "\x00") {
				if v, ok := strings.CutPrefix(a, "--health-addr="); ok {
					addr = v
				}
			}
			if addr == "" || strings.HasSuffix(addr, ":8081") {
				t.Fatalf("%s args %q: want --health-addr moved off :8081", what, cmdline)
			}
			testkit.Eventually(t, 30*time.Second, what+"'s /healthz answering 200", func(ctx context.Context) (bool, error) {
				resp, err := http.Get("http://127.0.0.1" + addr[strings.LastIndex(addr, ":"):] + "/healthz")
				if err != nil {
					return false, nil
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK, nil
			})
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			ev, _ := restartedEvent(t, buf, what, 0)
			if !strings.Contains(ev.Reason, "exited") || ev.PID == pid {
				t.Fatalf("restart of a killed %s: %+v, want 'exited' and a new pid (old %d)", what, ev, pid)
			}
		})
	}
}
