package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/manifests"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// TestSwitchingWiring: the ConfigWatcher's manifests of one wiring after
// another, each run by a new `opzero dev` session as a user switches
// (knative, then the hub, then classic, then the hub again), one
// ConfigMap change after each switch: each change is reconciled once
// (the serverless wirings deliver it once: nothing of the earlier wiring
// still sends), and nothing of the earlier wiring is left running
// (ApiServerSource adapters, the wakeup source, the classic Deployment's
// process, a Knative Service's instance).
func TestSwitchingWiring(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four opzero dev sessions")
	}
	t.Setenv("GOFLAGS", strings.TrimSpace(os.Getenv("GOFLAGS")+" -tags=opzero_classic")) // classic mode is linked with the tag (classic.go)
	env := testenv.Get(t)
	ns := env.Namespace(t)
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	createWebapp(t, env.Client, ns)
	cw := &v1.ConfigWatcher{}
	cw.Name, cw.Namespace = "webapp-config-watcher", ns
	cw.Spec = v1.ConfigWatcherSpec{ConfigMap: "webapp-config", PodSelector: map[string]string{"app": "webapp"}}
	cacheDir := t.TempDir() // the images dev builds, shared by the sessions
	for i, w := range []struct {
		name string
		o    manifests.Options
	}{
		{"knative", manifests.Options{Source: manifests.SourceKnative}},
		{"hub", manifests.Options{}},
		{"classic", manifests.Options{Mode: manifests.Classic}},
		{"hub again", manifests.Options{}},
	} {
		w.o.Namespace = ns
		objs, err := manifests.Build(ctx, root, "./examples/configwatcher", w.o)
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		stream, err := manifests.Stream(objs)
		if err != nil {
			t.Fatal(err)
		}
		us, err := dev.ReadManifests("-", bytes.NewReader(stream))
		if err != nil {
			t.Fatal(err)
		}
		events := filepath.Join(t.TempDir(), "events.jsonl")
		f, err := os.Create(events)
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		p, err := dev.Start(sctx, dev.Options{Kubeconfig: env.Kubeconfig, Objects: us, Dir: t.TempDir(), CacheDir: cacheDir, BuildDir: root,
			Idle: time.Second, Out: testkit.LogWriter(t), Events: dev.NewEventWriter(f)})
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", w.name, err)
		}
		stop := func() { cancel(); p.Stop(); f.Close() }

		// What the earlier wiring ran is gone before the change.
		left := leftovers(p, ns, w.name)
		if i == 0 { // created once the first wiring runs: Knative's adapter sends no event for what exists when it starts
			if err := env.Client.Create(ctx, cw); err != nil {
				t.Fatal(err)
			}
		}
		// The first session's start reconciles the new ConfigWatcher; the
		// change is made once that has settled.
		testkit.Eventually(t, 60*time.Second, w.name+": the ConfigWatcher reconciled", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw)
			return err == nil && cw.Status.ConfigMapVersion != "", err
		})
		time.Sleep(3 * time.Second) // past the start's own deliveries
		changed := time.Now()
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webapp-config"}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["message"] = fmt.Sprintf("after switch %d to %s", i, w.name)
		if err := env.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 60*time.Second, w.name+": the change reconciled", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(cw), cw)
			return err == nil && cw.Status.ConfigMapVersion == cm.ResourceVersion, err
		})
		time.Sleep(3 * time.Second) // a second delivery of it would be here by now
		left = append(left, leftovers(p, ns, w.name)...)
		stop()
		deliveries := configMapDeliveries(t, events, changed)
		want := 1
		if w.o.Mode == manifests.Classic {
			want = 0 // its own informers: no delivery
		}
		t.Logf("%s: the change delivered %d time(s) (want %d); left of earlier wirings: %v", w.name, deliveries, want, left)
		if deliveries != want {
			t.Errorf("%s: the ConfigMap change delivered %d times, want %d", w.name, deliveries, want)
		}
		if len(left) > 0 {
			t.Errorf("%s: still running from an earlier wiring: %s", w.name, strings.Join(left, "; "))
		}
	}
}

// leftovers is what runs in session p that the wiring named does not
// have.
func leftovers(p *dev.Platform, ns, wiring string) []string {
	var left []string
	if wiring != "knative" {
		for src, pid := range p.SourcePIDs() {
			if strings.HasPrefix(src, "ApiServerSource") && pid != 0 {
				left = append(left, fmt.Sprintf("%s (pid %d)", src, pid))
			}
		}
		if pid := p.DeploymentPID(ns, "configwatcher-wakeup-source"); pid != 0 {
			left = append(left, fmt.Sprintf("the wakeup source (pid %d)", pid))
		}
	}
	if wiring != "classic" {
		if pid := p.DeploymentPID(ns, "configwatcher"); pid != 0 {
			left = append(left, fmt.Sprintf("the classic Deployment's process (pid %d)", pid))
		}
	}
	return left
}

// configMapDeliveries counts the deliveries of ConfigMap changes to the
// operator in the events file since t0.
func configMapDeliveries(t *testing.T, file string, t0 time.Time) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e dev.Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event != dev.EventDelivery || e.Time.Before(t0) {
			continue
		}
		t.Logf("delivery since the change: %s %s %s %s -> %d %s", e.Service, e.Type, e.Kind, e.Key, e.Code, e.Result)
		if e.Kind == "ConfigMap" {
			n++
		}
	}
	return n
}
