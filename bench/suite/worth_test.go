package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/internal/devenv/devtest"
)

func TestJoinManifestsKeepsSharedObjectsOnce(t *testing.T) {
	op := func(ns string) string {
		return "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  labels:\n    name: x\n  name: configwatchers.k8spatterns.io\nspec: {}\n---\n" +
			"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: configwatcher\n  namespace: " + ns + "\n"
	}
	got := joinManifests([]string{op("wo-01"), op("wo-02")})
	if n := strings.Count(got, "kind: CustomResourceDefinition"); n != 1 {
		t.Errorf("%d CRDs, want 1:\n%s", n, got)
	}
	if n := strings.Count(got, "kind: ServiceAccount"); n != 2 {
		t.Errorf("%d ServiceAccounts, want 2 (one per namespace):\n%s", n, got)
	}
}

func TestMergeSectionKeepsOtherParts(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b.md")
	base := "# Benchmarks\n\n## Memory\n\nm\n\n## Reading the figures\n\nr\n"
	if err := os.WriteFile(out, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one\n", "two\n"} {
		if err := mergeSection(out, "## "+worthTitle+"\n\n"+body); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(out)
	want := "# Benchmarks\n\n## Memory\n\nm\n\n## " + worthTitle + "\n\ntwo\n\n## Reading the figures\n\nr\n"
	if string(b) != want {
		t.Errorf("got\n%q\nwant\n%q", b, want)
	}
}

func TestChurnWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	svc := "wo-01/configwatcher"
	evs := []dev.Event{
		{Time: at(-5), Event: dev.EventProcessStarted, Service: svc, ColdStart: true}, // up before the window
		{Time: at(-4), Event: dev.EventProcessStarted, Deployment: "wo-01/w"},         // not an instance
		{Time: at(2), Event: dev.EventProcessStopped, Service: svc},
		{Time: at(4), Event: dev.EventProcessStarted, Service: svc, ColdStart: true},
		{Time: at(4.1), Event: dev.EventDelivery, Service: svc},
		{Time: at(4.2), Event: dev.EventReconciled, Service: svc, Reconciled: 2},
		{Time: at(7), Event: dev.EventProcessStopped, Service: svc},
		{Time: at(20), Event: dev.EventProcessStarted, Service: svc, ColdStart: true}, // after it
	}
	var res churnResult
	churnWindow(evs, t0, at(10), &res, ofServices)
	if res.up != 5*time.Second || res.coldStarts != 1 || res.starts != 1 || res.deliveries != 1 || res.reconciles != 2 {
		t.Errorf("got %+v, want 5s up, 1 cold start, 1 delivery, 2 reconciles", res)
	}
	// A served Deployment's processes are its instances.
	res = churnResult{}
	churnWindow(evs, t0, at(10), &res, ofDeployment("wo-01/w"))
	if res.up != 10*time.Second || res.starts != 0 {
		t.Errorf("the Deployment's: got %+v, want 10s up (started before the window), no start in it", res)
	}
}

// TestSecondReplica: the hub's second replica runs the first one's binary
// and flags with its own name in the Leases and free ports, and keeps the
// rest of its environment (its kubeconfig, the Leases' namespace).
func TestSecondReplica(t *testing.T) {
	argv, env := devtest.SecondReplica([]string{"/ko/opzero-hub", "--health-addr=:37907", "--webhook-addr=:8443", "--buckets=4"},
		map[string]string{"POD_NAME": "opzero-hub-local", "POD_NAMESPACE": "opzero-system", "KUBECONFIG": "/k", "OPZERO_WEBHOOK_PORT": "9443"})
	wantArgv := []string{"/ko/opzero-hub", "--health-addr=127.0.0.1:0", "--webhook-addr=127.0.0.1:0", "--buckets=4"}
	if !slices.Equal(argv, wantArgv) {
		t.Errorf("argv %q, want %q", argv, wantArgv)
	}
	wantEnv := []string{"KUBECONFIG=/k", "OPZERO_WEBHOOK_PORT=0", "POD_NAME=opzero-hub-local-2", "POD_NAMESPACE=opzero-system"}
	if !slices.Equal(env, wantEnv) {
		t.Errorf("env %q, want %q", env, wantEnv)
	}
}
