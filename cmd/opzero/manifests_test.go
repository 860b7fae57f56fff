package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
	"github.com/spf13/cobra"
)

func runOpzero(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestManifestsCommand: the user's path, from the repository root: a folder
// of files equal to the golden ones (the default, the hub wiring), the same
// as one stream on stdout.
func TestManifestsCommand(t *testing.T) {
	t.Chdir("../..")
	dir := filepath.Join(t.TempDir(), "deploy")
	if out, err := runOpzero(t, "manifests", "--operator", "./examples/configwatcher", "-o", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	golden := filepath.Join("internal", "manifests", "testdata", "golden", "serverless")
	entries, err := os.ReadDir(golden)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	files := []string{"crds.yaml", "hub.yaml", "rbac.yaml", "operator.yaml", "sources.yaml"}
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(golden, name))
		if !bytes.Equal(b, want) {
			t.Errorf("%s differs from %s", name, filepath.Join(golden, name))
		}
		all = append(all, b...)
	}
	if len(entries) != len(files) {
		t.Errorf("golden has %d files, want %d", len(entries), len(files))
	}
	stream, err := runOpzero(t, "manifests", "./examples/configwatcher") // the package as an argument
	if err != nil {
		t.Fatal(err)
	}
	if stream != string(all) {
		t.Errorf("-o - differs from the files concatenated in apply order")
	}
}

// TestManifestsBadFlags: mistakes are reported with what to do.
func TestManifestsBadFlags(t *testing.T) {
	t.Chdir("../..")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"manifests"}, "which operator?"},
		{[]string{"manifests", "--operator", "./examples/configwatcher", "./bench/crbaseline"}, "two operators"},
		{[]string{"manifests", "./examples/configwatcher", "./bench/crbaseline"}, "one operator package, got 2"},
		{[]string{"manifests", "--operator", "./examples/configwatcher", "--mode", "lambda"}, "want serverless or classic"},
		{[]string{"manifests", "--operator", "./examples/configwatcher", "--timeout", "10ms"}, "at least 1s"},
		{[]string{"manifests", "--operator", "./nosuch"}, "Go package path of the operator's main"},
		{[]string{"manifests", "--operator", "./builder"}, "not a command"},
		{[]string{"manifests", "--operatr", "./examples/configwatcher"}, "unknown flag: --operatr"},
		{[]string{"manifests", "./examples/configwatcher", "--source", "mesh"}, `--source="mesh": want knative or hub`},
		{[]string{"manifests", "./examples/configwatcher", "--source", "hub", "--mode", "classic"}, "--source=hub: the hub delivers to serverless operators"},
	} {
		out, err := runOpzero(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("opzero %s: got %v (%s), want an error containing %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	help, err := runOpzero(t, "manifests", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"OPZERO_DESCRIBE", "ApiServerSource", "--mode", "deterministic", "--source=hub", "--hub-image", "--help-files"} {
		if !strings.Contains(help, w) {
			t.Errorf("help does not mention %q", w)
		}
	}
	// -h is a usage; --help-files says what each file holds, and writes nothing
	files, err := runOpzero(t, "manifests", "--help-files")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"crds.yaml", "rbac.yaml", "least-privilege", "operator.yaml", "sources.yaml", "hub.yaml", "wakeup-source.yaml", "broker.yaml", "webhooks.yaml", "deterministic"} {
		if !strings.Contains(files, w) {
			t.Errorf("--help-files does not mention %q", w)
		}
		if strings.Contains(help, w) && w == "least-privilege" {
			t.Errorf("-h still holds the file table (%q)", w)
		}
	}
	if n := strings.Count(help, "\n"); n > 140 {
		t.Errorf("manifests -h is %d lines: a usage, the file table is --help-files's", n)
	}
}

// TestManifestsEnvFlags: --env, --env-secret, --env-from-* and the
// arguments after -- give the golden serverless-env and classic-env
// operators; bad ones are refused and nothing is written.
func TestManifestsEnvFlags(t *testing.T) {
	t.Chdir("../..")
	t.Setenv("GOFLAGS", "-tags=opzero_classic") // the example with classic mode linked (its classic.go)
	flags := []string{"--env", "LOG_LEVEL=debug", "--env-secret", "GITHUB_TOKEN=github:token",
		"--env-from-configmap", "cw-settings", "--env-from-secret", "cw-credentials", "--", "--max-concurrent-reconciles=4"}
	for _, mode := range []string{"serverless", "classic"} {
		dir := filepath.Join(t.TempDir(), "deploy")
		args := append([]string{"manifests", "./examples/configwatcher", "--mode", mode, "-o", dir}, flags...)
		if out, err := runOpzero(t, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got, err := os.ReadFile(filepath.Join(dir, "operator.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join("internal", "manifests", "testdata", "golden", mode+"-env", "operator.yaml"))
		if !bytes.Equal(got, want) {
			t.Errorf("%s: operator.yaml differs from the golden %s-env one:\n%s", mode, mode, got)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--env", "PORT=9090"}, "Knative sets"},
		{[]string{"--env", "LOG LEVEL=debug"}, "not a valid environment variable name"},
		{[]string{"--env", "NOEQUALS"}, "want NAME=VALUE"},
		{[]string{"--env", "A=1", "--env", "A=2"}, "env A is given twice with different values"},
		{[]string{"--env-secret", "TOKEN=github"}, "want NAME=SECRET:KEY"},
		{[]string{"--env-from-secret", "Not_A_Name"}, `--env-from-secret "Not_A_Name"`},
		{[]string{"--", "--no-such-flag"}, "the operator has no flag --no-such-flag"},
		{[]string{"--", "--mode=classic"}, "sets --mode itself"},
	} {
		dir := filepath.Join(t.TempDir(), "deploy")
		args := append([]string{"manifests", "./examples/configwatcher", "-o", dir}, tc.args...)
		out, err := runOpzero(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("opzero %s: got %v (%s), want an error containing %q", strings.Join(args, " "), err, out, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("opzero %s: %s was written (%v)", strings.Join(args, " "), dir, err)
		}
	}
}

// TestManifestsSourceHub: the default and --source=hub write the golden
// serverless files; regenerating the folder with --source=knative removes
// hub.yaml, and the other way round wakeup-source.yaml (no stale wiring is
// left); --install-hub=false leaves hub.yaml out.
func TestManifestsSourceHub(t *testing.T) {
	t.Chdir("../..")
	dir := filepath.Join(t.TempDir(), "deploy")
	golden := filepath.Join("internal", "manifests", "testdata", "golden", "serverless")
	for _, args := range [][]string{{"--source=hub"}, {"--source=knative"}, {}, {"--install-hub=false"}, {"--source", "hub"}} {
		if out, err := runOpzero(t, append([]string{"manifests", "./examples/configwatcher", "-o", dir}, args...)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		_, errHub := os.Stat(filepath.Join(dir, "hub.yaml"))
		_, errWakeup := os.Stat(filepath.Join(dir, "wakeup-source.yaml"))
		switch {
		case slices.Equal(args, []string{"--source=knative"}):
			if !os.IsNotExist(errHub) || errWakeup != nil {
				t.Errorf("--source=knative: hub.yaml %v, wakeup-source.yaml %v; want only the latter", errHub, errWakeup)
			}
			continue
		case slices.Equal(args, []string{"--install-hub=false"}):
			if !os.IsNotExist(errHub) || !os.IsNotExist(errWakeup) {
				t.Errorf("--install-hub=false: hub.yaml %v, wakeup-source.yaml %v; want neither", errHub, errWakeup)
			}
			b, _ := os.ReadFile(filepath.Join(dir, "sources.yaml"))
			want, _ := os.ReadFile(filepath.Join(golden, "sources.yaml"))
			if !bytes.Equal(b, want) {
				t.Errorf("--install-hub=false: sources.yaml differs from %s", filepath.Join(golden, "sources.yaml"))
			}
			continue
		}
		if errHub != nil || !os.IsNotExist(errWakeup) {
			t.Errorf("%v: hub.yaml %v, wakeup-source.yaml %v; want only the former", args, errHub, errWakeup)
		}
		entries, err := os.ReadDir(golden)
		if err != nil {
			t.Fatal(err)
		}
		written, _ := os.ReadDir(dir)
		if len(written) != len(entries) {
			t.Errorf("%v: wrote %d files, golden has %d", args, len(written), len(entries))
		}
		for _, e := range entries {
			got, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			want, _ := os.ReadFile(filepath.Join(golden, e.Name()))
			if !bytes.Equal(got, want) {
				t.Errorf("%v: %s differs from %s", args, e.Name(), filepath.Join(golden, e.Name()))
			}
		}
	}
}

// TestManifestsHubEvents: --hub-events ConfigMap=created,deleted (and the
// same kind again) writes the ConfigMap resource's events in the
// Subscription; a kind the ConfigWatcher does not watch, another type,
// a flag without Kind= or --source=knative is an error naming the flag,
// and the folder is not written.
func TestManifestsHubEvents(t *testing.T) {
	t.Chdir("../..")
	out, err := runOpzero(t, "manifests", "./examples/configwatcher", "--hub-events", "ConfigMap=deleted", "--hub-events", "ConfigMap=created")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "    events:\n    - created\n    - deleted\n    kind: ConfigMap\n") {
		t.Errorf("the Subscription's ConfigMap resource lacks events [created, deleted]:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--hub-events", "Secret=created"}, "--hub-events Secret=...: the operator watches no Secret (it watches ConfigMap, ConfigWatcher)"},
		{[]string{"--hub-events", "ConfigMap=created,patched"}, `"patched" is no type of change; want created, updated, deleted`},
		{[]string{"--hub-events", "ConfigMap"}, `--hub-events "ConfigMap": want Kind=created,updated,deleted`},
		{[]string{"--hub-events", "ConfigMap=created", "--source=knative"}, "--hub-events: the hub drops the changes it names"},
	} {
		dir := filepath.Join(t.TempDir(), "deploy")
		out, err := runOpzero(t, append([]string{"manifests", "./examples/configwatcher", "-o", dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (%s), want an error containing %q", c.args, err, out, c.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%v: the folder was written (%v)", c.args, err)
		}
	}
}

// TestManifestsWebhookBadInputWritesNothing: a project whose kind has two
// versions with other schemas and no conversion, or whose markers declare
// webhooks it does not register, gets an error naming the file to fix, and
// the folder is not written.
func TestManifestsWebhookBadInputWritesNothing(t *testing.T) {
	t.Chdir("../..")
	for env, want := range map[string]string{
		"WIDGETS_OLD_VERSION": "v1alpha1 in internal/manifests/testdata/widgets/api/v1alpha1/types.go",
		"WIDGETS_NO_WEBHOOKS": "internal/manifests/testdata/widgets/main.go: path=/mutate-widgets-opzero-dev-v1-widget",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "1") // the described binary inherits it
			dir := filepath.Join(t.TempDir(), "deploy")
			out, err := runOpzero(t, "manifests", "./internal/manifests/testdata/widgets", "-o", dir)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing written") {
				t.Fatalf("error %v (output %s), want one naming %q", err, out, want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the folder was written (%v)", err)
			}
		})
	}
	if _, err := runOpzero(t, "manifests", "./internal/manifests/testdata/widgets", "--webhooks=sidecar"); err == nil || !strings.Contains(err.Error(), `--webhooks="sidecar": want hub or always-on`) {
		t.Errorf("--webhooks=sidecar: %v", err)
	}
}

// TestManifestsProjectConfig: --config reads what a kubebuilder-style
// config/default declares for the manager into the output (here
// MEMCACHED_IMAGE, the namePrefix, the Namespace); a kustomization that
// does not build is an error naming it, and nothing is written; --config=none
// reads nothing.
func TestManifestsProjectConfig(t *testing.T) {
	t.Chdir("../..")
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, "config"), os.DirFS("internal/kustomize/testdata/project/config")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(tmp, "config", "default")
	dir := filepath.Join(tmp, "deploy")
	out, err := runOpzero(t, "manifests", "./examples/configwatcher", "--config", cfg, "-o", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "read the manager's settings from "+filepath.Join(cfg, "kustomization.yaml")) {
		t.Errorf("output does not say where the settings come from:\n%s", out)
	}
	op, _ := os.ReadFile(filepath.Join(dir, "operator.yaml"))
	for _, want := range []string{"name: MEMCACHED_IMAGE", "value: memcached:1.6.26-alpine3.19", "name: memcached-configwatcher", "namespace: memcached-system"} {
		if !strings.Contains(string(op), want) {
			t.Errorf("operator.yaml has no %q:\n%s", want, op)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "namespace.yaml")); err != nil {
		t.Errorf("no namespace.yaml: %v", err)
	}

	if err := os.WriteFile(filepath.Join(cfg, "kustomization.yaml"), []byte("resources:\n- ../manager\n- missing.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(tmp, "bad")
	out, err = runOpzero(t, "manifests", "./examples/configwatcher", "--config", cfg, "-o", bad)
	if err == nil || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), "missing.yaml") || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("a kustomization that does not build: %v\n%s", err, out)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("the folder was written (%v)", err)
	}

	out, err = runOpzero(t, "manifests", "./examples/configwatcher", "--config", "none")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "MEMCACHED_IMAGE") {
		t.Error("--config=none read the config")
	}
}

// TestUnbuiltConfigDefault: a project's config/default that does not
// build yet (kubebuilder's refers to config/crd/bases before `make
// manifests` wrote it), found rather than asked for, is a warning naming
// it, and nothing of it is read; the same folder given with --config is
// an error.
func TestUnbuiltConfigDefault(t *testing.T) {
	mod := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":                            "module example.com/unbuilt\n\ngo 1.24\n",
		"main.go":                           "package main\n\nfunc main() {}\n",
		"config/default/kustomization.yaml": "resources:\n- ../crd\n- ../manager\nnamePrefix: unbuilt-\n",
		"config/crd/kustomization.yaml":     "resources:\n- bases/example.com_things.yaml\n",
		"config/manager/kustomization.yaml": "resources:\n- manager.yaml\n",
		"config/manager/manager.yaml":       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: controller-manager}\nspec:\n  template:\n    spec:\n      containers: [{name: manager, image: controller:latest}]\n",
	} {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	cmd.SetErr(&stderr)
	cmd.Flags().String("namespace", "default", "")
	o := manifests.Options{Namespace: "default"}
	if _, err := readConfig(cmd, mod, ".", "", "-", &o); err != nil {
		t.Fatalf("config/default found but not building: %v, want a warning", err)
	}
	if o.Project != nil || o.Namespace != "default" || !strings.Contains(stderr.String(), "warning: ") || !strings.Contains(stderr.String(), filepath.Join(mod, "config", "default")) {
		t.Fatalf("project %v, namespace %q, stderr %q: want nothing read and a warning naming config/default", o.Project, o.Namespace, stderr.String())
	}
	if _, err := readConfig(cmd, mod, ".", filepath.Join(mod, "config", "default"), "-", &manifests.Options{}); err == nil || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("--config naming it: %v, want an error", err)
	}
}
