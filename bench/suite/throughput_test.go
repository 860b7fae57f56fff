package main

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestThroughputDefaultIsTheGolden: the throughput part's default wiring
// (tpDefault, tpSubscription) runs the operator with the arguments and
// environment `opzero manifests` writes for the ConfigWatcher, and the
// same Subscription, but for what the bench cannot do as a cluster does
// (the sender's token and the operator's address), so that its figure is
// the default's.
func TestThroughputDefaultIsTheGolden(t *testing.T) {
	dir := "../../internal/manifests/testdata/golden/serverless/"
	var svc struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string
						Env  []struct{ Name, Value string }
					}
				}
			}
		}
	}
	readYAML(t, dir+"operator.yaml", &svc)
	c := svc.Spec.Template.Spec.Containers[0]
	var args []string
	durable := false
	for _, a := range c.Args {
		switch {
		case a == "--mode=serverless", strings.HasPrefix(a, "--audience="), strings.HasPrefix(a, "--allowed-senders="):
			// the bench: --mode=serverless --insecure-no-auth
		case strings.HasPrefix(a, "--wakeup-sink="):
			durable = true
		default:
			args = append(args, a)
		}
	}
	if !slices.Equal(args, tpDefault.args) || durable != tpDefault.durable {
		t.Errorf("the golden Service's arguments %v: the bench's default has %v, durable %v", c.Args, tpDefault.args, tpDefault.durable)
	}
	var env []string
	for _, e := range c.Env {
		if e.Name != "POD_NAMESPACE" { // the bench's namespace
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if !slices.Equal(env, tpDefault.env) {
		t.Errorf("the golden Service's environment %v: the bench's default has %v", env, tpDefault.env)
	}

	var sub map[string]any
	readYAML(t, dir+"sources.yaml", &sub)
	want := sub["spec"].(map[string]any)
	got := tpSubscription("ns", 1, tpDefault.hubConcurrency, tpDefault.durable).Object["spec"].(map[string]any)
	for _, k := range []string{"delivery", "wakeups"} {
		if !reflect.DeepEqual(normalize(t, want[k]), normalize(t, got[k])) {
			t.Errorf("Subscription spec.%s: golden %v, the bench's %v", k, want[k], got[k])
		}
	}
	wantRes, gotRes := want["resources"].([]any), got["resources"].([]any)
	if len(wantRes) != len(gotRes) {
		t.Fatalf("Subscription resources: golden %v, the bench's %v", wantRes, gotRes)
	}
	for i := range wantRes {
		w, g := wantRes[i].(map[string]any), gotRes[i].(map[string]any)
		delete(g, "namespaces") // the bench's own namespace; the golden's: all
		if !reflect.DeepEqual(normalize(t, w), normalize(t, g)) {
			t.Errorf("Subscription resource %d: golden %v, the bench's %v", i, w, g)
		}
	}
}

func readYAML(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(string(b), "---\n")), into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// normalize is v as JSON decodes it (numbers as float64).
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := yaml.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
