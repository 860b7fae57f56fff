package manifests_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the generator's output")

// goldenCases are the ConfigWatcher example deployed each way.
var goldenCases = map[string]manifests.Options{
	// the default: a Subscription to the hub, and the hub
	"serverless": {Mode: manifests.Serverless},
	// --source=knative: an ApiServerSource per kind, PingSources, a wakeup source
	"serverless-knative": {Mode: manifests.Serverless, Source: manifests.SourceKnative},
	"classic":            {Mode: manifests.Classic},
	"serverless-broker": {Mode: manifests.Serverless, Namespace: "ops", Idle: 3 * time.Second, Broker: "default",
		TriggerType: "com.example.config.changed", Delivery: manifests.Delivery{DeadLetterSink: "http://dls.ops.svc.cluster.local"}},
	"serverless-no-durable-time": {Mode: manifests.Serverless, NoDurableTime: true},
	// the operator also takes external events (eventCases): its own Broker, a Trigger per filter
	"serverless-events": {Mode: manifests.Serverless, Namespace: "ops", Delivery: manifests.Delivery{Retry: 3,
		BackoffPolicy: "linear", BackoffDelay: "PT0.2S", DeadLetterSink: "http://dls.ops.svc.cluster.local"}},
	"classic-events": {Mode: manifests.Classic, Namespace: "ops"},
	"serverless-env": envOptions(manifests.Serverless),
	"classic-env":    envOptions(manifests.Classic),
}

// envOptions are the environment and extra arguments of
// `opzero manifests --env LOG_LEVEL=debug --env-secret GITHUB_TOKEN=github:token
// --env-from-configmap cw-settings --env-from-secret cw-credentials -- --max-concurrent-reconciles=4`.
func envOptions(mode string) manifests.Options {
	return manifests.Options{Mode: mode,
		Env: []description.EnvVar{{Name: "LOG_LEVEL", Value: "debug"},
			{Name: "GITHUB_TOKEN", Secret: &description.KeyRef{Name: "github", Key: "token"}}},
		EnvFrom: []manifests.EnvFrom{{Kind: "Secret", Name: "cw-credentials"}, {Kind: "ConfigMap", Name: "cw-settings"}},
		Args:    []string{"--max-concurrent-reconciles=4"},
	}
}

// eventCases are the golden cases whose operator also declares
// WatchesEvents: the ConfigWatcher's description with eventWatches added.
var eventCases = map[string]bool{"serverless-events": true, "classic-events": true}

var eventWatches = []description.EventWatch{
	{Name: "hook", Attributes: map[string]string{"type": "com.example.config.changed", "source": ""}},
	{Name: "drift", Filters: []description.TriggerFilter{
		{Prefix: map[string]string{"type": "com.example.drift."}},
		{Any: []description.TriggerFilter{{Exact: map[string]string{"subject": "settings"}}, {Suffix: map[string]string{"source": "/prod"}}}},
		{Not: &description.TriggerFilter{Exact: map[string]string{"dryrun": "true"}}},
	}},
}

// generateCase generates a golden case (with eventWatches if it is one of eventCases).
func generateCase(t *testing.T, name string, o manifests.Options) []manifests.Object {
	t.Helper()
	if !eventCases[name] {
		return generate(t, o)
	}
	tg := *configWatcher(t)
	tg.Desc.Operators = append([]description.Controller(nil), tg.Desc.Operators...)
	tg.Desc.Operators[0].Events = eventWatches
	in, err := manifests.Prepare(context.Background(), &tg, o)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, o)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

var (
	cwOnce   sync.Once
	cwTarget *manifests.Target
	cwErr    error
)

// configWatcher describes the example once per test binary (a go build).
func configWatcher(t *testing.T) *manifests.Target {
	t.Helper()
	cwOnce.Do(func() {
		cwTarget, cwErr = manifests.Describe(context.Background(), repoRoot(t), "./examples/configwatcher")
	})
	if cwErr != nil {
		t.Fatal(cwErr)
	}
	return cwTarget
}

// generate is the ConfigWatcher example's manifests for o.
func generate(t *testing.T, o manifests.Options) []manifests.Object {
	t.Helper()
	return generateFor(t, configWatcher(t), o)
}

// generateFor is target's manifests for o.
func generateFor(t *testing.T, target *manifests.Target, o manifests.Options) []manifests.Object {
	t.Helper()
	in, err := manifests.Prepare(context.Background(), target, o)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, o)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestGolden compares the manifests of the ConfigWatcher example with
// testdata/golden/<case>/; `go test ./internal/manifests -run TestGolden -update`
// rewrites them.
func TestGolden(t *testing.T) {
	for name, o := range goldenCases {
		t.Run(name, func(t *testing.T) {
			files, err := manifests.Files(generateCase(t, name, o))
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, name, files)
		})
	}
}

// compareGolden compares files with testdata/golden/<name>/ (-update
// rewrites them).
func compareGolden(t *testing.T, name string, files map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, b := range files {
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (run with -update to create the golden files)", err)
	}
	var have []string
	for _, e := range entries {
		have = append(have, e.Name())
		want, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if got := files[e.Name()]; !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from the generated one (run with -update if the change is intended):\n%s", dir, e.Name(), diffLines(string(want), string(got)))
		}
	}
	var gen []string
	for f := range files {
		gen = append(gen, f)
	}
	sort.Strings(gen)
	if strings.Join(gen, ",") != strings.Join(have, ",") {
		t.Errorf("generated files %v, golden files %v", gen, have)
	}
}

// TestDeterministic: generating twice gives the same bytes.
func TestDeterministic(t *testing.T) {
	o := goldenCases["serverless-broker"]
	a, err := manifests.Stream(generate(t, o))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b, _ := manifests.Stream(generate(t, o))
		if !bytes.Equal(a, b) {
			t.Fatalf("two runs differ:\n%s", diffLines(string(a), string(b)))
		}
	}
}

// diffLines shows the first lines that differ.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n  golden:    " + a + "\n  generated: " + b
		}
	}
	return "(same lines)"
}
