package manifests_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// operatorContainer returns the operator's container in objs (the Knative
// Service's or the Deployment's).
func operatorContainer(t *testing.T, objs []manifests.Object) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.File != manifests.FileOperator {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Obj, "spec", "template", "spec", "containers")
		return cs[0].(map[string]any)
	}
	t.Fatal("no operator object")
	return nil
}

func envNames(c map[string]any) []string {
	var out []string
	for _, e := range c["env"].([]any) {
		out = append(out, e.(map[string]any)["name"].(string))
	}
	return out
}

// TestEnvDeclaredAndFromFlags: what the operator declares comes first, the
// command line's after it, a name given by both with the same value once,
// in both modes.
func TestEnvDeclaredAndFromFlags(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in.Operator.Env = []description.EnvVar{{Name: "REGION", Value: "eu"},
		{Name: "API_KEY", Secret: &description.KeyRef{Name: "api", Key: "key"}}}
	for mode, generated := range map[string]string{manifests.Serverless: "OPZERO_MAX_SCALE,POD_NAMESPACE,OPZERO_HUB_PEERS", manifests.Classic: "POD_NAMESPACE"} {
		o := manifests.Options{Mode: mode, Env: []description.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}, {Name: "REGION", Value: "eu"}}}
		objs, err := manifests.Generate(in, o)
		if err != nil {
			t.Fatal(err)
		}
		c := operatorContainer(t, objs)
		if got, want := strings.Join(envNames(c), ","), generated+",REGION,API_KEY,LOG_LEVEL"; got != want {
			t.Errorf("%s: env %s, want %s", mode, got, want)
		}
		if _, ok := c["envFrom"]; ok {
			t.Errorf("%s: envFrom without --env-from-*", mode)
		}
	}
}

// TestBadEnvIsRefused: each mistake is an error that names it, and no
// object is generated.
func TestBadEnvIsRefused(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	declared := in
	declared.Operator.Env = []description.EnvVar{{Name: "REGION", Value: "eu"}}
	for _, tc := range []struct {
		name string
		in   manifests.Input
		o    manifests.Options
		want string
	}{
		{"Knative's PORT", in, manifests.Options{Env: []description.EnvVar{{Name: "PORT", Value: "9090"}}}, "Knative sets"},
		{"Knative's K_SERVICE", in, manifests.Options{Env: []description.EnvVar{{Name: "K_SERVICE", Value: "x"}}}, "Knative sets"},
		{"classic too", in, manifests.Options{Mode: manifests.Classic, Env: []description.EnvVar{{Name: "K_REVISION", Value: "x"}}}, "Knative sets"},
		{"opzero's own", in, manifests.Options{Env: []description.EnvVar{{Name: "POD_NAMESPACE", Value: "x"}}}, "opzero manifests sets it"},
		{"invalid name", in, manifests.Options{Env: []description.EnvVar{{Name: "1X", Value: "x"}}}, "not a valid environment variable name"},
		{"twice on the command line", in, manifests.Options{Env: []description.EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}}},
			`env A is given twice with different values: "1" by --env and "2" by --env`},
		{"declared and flag differ", declared, manifests.Options{Env: []description.EnvVar{{Name: "REGION", Value: "us"}}},
			`"eu" by the operator (builder.WithEnv) and "us" by --env`},
		{"literal and secret", declared, manifests.Options{Env: []description.EnvVar{{Name: "REGION", Secret: &description.KeyRef{Name: "r", Key: "k"}}}},
			"Secret r key k by --env-secret"},
		{"bad secret", in, manifests.Options{Env: []description.EnvVar{{Name: "T", Secret: &description.KeyRef{Name: "Bad_Secret", Key: "k"}}}}, `Secret name "Bad_Secret"`},
		{"bad envFrom", in, manifests.Options{EnvFrom: []manifests.EnvFrom{{Kind: "ConfigMap", Name: "no/slash"}}}, `--env-from-configmap "no/slash"`},
		{"arg sets --mode", in, manifests.Options{Args: []string{"--mode=classic"}}, "sets --mode itself"},
		{"arg sets --audience", in, manifests.Options{Args: []string{"-audience", "x"}}, "sets --audience itself (use --audience of opzero manifests)"},
		{"unknown flag", in, manifests.Options{Args: []string{"--max-concurent-reconciles=4"}}, "the operator has no flag --max-concurent-reconciles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := manifests.Generate(tc.in, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if objs != nil {
				t.Errorf("%d objects with an error", len(objs))
			}
		})
	}
}

func TestParseEnv(t *testing.T) {
	v, err := manifests.ParseEnv("URL=http://x?a=b")
	if err != nil || v.Name != "URL" || v.Value != "http://x?a=b" {
		t.Errorf("got %+v, %v", v, err)
	}
	if v, err := manifests.ParseEnv("EMPTY="); err != nil || v.Value != "" {
		t.Errorf("empty value: %+v, %v", v, err)
	}
	v, err = manifests.ParseSecretEnv("GITHUB_TOKEN=github:token")
	if err != nil || v.Secret == nil || *v.Secret != (description.KeyRef{Name: "github", Key: "token"}) {
		t.Errorf("got %+v, %v", v, err)
	}
	for s, want := range map[string]string{"NOVALUE": "want NAME=VALUE", "PORT=1": "Knative sets", "1X=1": "not a valid", "A B=1": "not a valid"} {
		if _, err := manifests.ParseEnv(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--env %s: got %v, want %q", s, err, want)
		}
	}
	for s, want := range map[string]string{"T=github": "want NAME=SECRET:KEY", "T": "want NAME=SECRET:KEY", "T=:k": "no Secret name", "T=s:": "want NAME=SECRET:KEY"} {
		if _, err := manifests.ParseSecretEnv(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--env-secret %s: got %v, want %q", s, err, want)
		}
	}
}

// TestArgsValuesAreNotFlags: a negative value after a flag is not taken
// for a flag.
func TestArgsValuesAreNotFlags(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Generate(in, manifests.Options{Args: []string{"--follow-up-settle", "-1ns", "-max-in-flight", "10", "positional"}})
	if err != nil {
		t.Fatal(err)
	}
	args := operatorContainer(t, objs)["args"].([]any)
	if got := args[len(args)-5:]; got[0] != "--follow-up-settle" || got[4] != "positional" {
		t.Errorf("args end with %v", got)
	}
}

// TestMaxScaleEnv: OPZERO_MAX_SCALE carries the bound the Service gets,
// and -1 for an unbounded one (Knative's max-scale 0), which the operator
// would otherwise take for a single instance and reconcile without
// per-key Leases.
func TestMaxScaleEnv(t *testing.T) {
	in, err := manifests.Prepare(context.Background(), configWatcher(t), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for maxScale, want := range map[int]string{0: "-1", 1: "1", 3: "3"} {
		in.Operator.Deploy.MaxScale = maxScale
		objs, err := manifests.Generate(in, manifests.Options{Mode: manifests.Serverless})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range operatorContainer(t, objs)["env"].([]any) {
			if m := e.(map[string]any); m["name"] == "OPZERO_MAX_SCALE" {
				got, _ = m["value"].(string)
			}
		}
		if got != want {
			t.Errorf("max-scale %d: OPZERO_MAX_SCALE %q, want %q", maxScale, got, want)
		}
	}
}
