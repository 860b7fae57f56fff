package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHubManifests: `opzero hub manifests` writes the hub exactly as every
// operator's hub.yaml has it (the golden serverless case), and the
// Subscription and Wakeup CRDs as config/crd has them; it refuses to write
// into an operator's folder, whose files it would remove.
func TestHubManifests(t *testing.T) {
	t.Chdir("../..")
	dir := filepath.Join(t.TempDir(), "hub")
	if out, err := runOpzero(t, "hub", "manifests", "-o", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "hub.yaml"))
	want, _ := os.ReadFile(filepath.Join("internal", "manifests", "testdata", "golden", "serverless", "hub.yaml"))
	if len(got) == 0 || !bytes.Equal(got, want) {
		t.Errorf("hub.yaml differs from the golden operator's hub.yaml")
	}
	crds, _ := os.ReadFile(filepath.Join(dir, "crds.yaml"))
	for _, f := range []string{"opzero.dev_subscriptions.yaml", "opzero.dev_wakeups.yaml"} {
		b, _ := os.ReadFile(filepath.Join("config", "crd", f))
		if len(b) == 0 || !bytes.Contains(crds, b) {
			t.Errorf("crds.yaml lacks config/crd/%s as it is", f)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("wrote %d files, want crds.yaml and hub.yaml", len(entries))
	}

	op := filepath.Join(t.TempDir(), "deploy")
	if err := os.MkdirAll(op, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(op, "operator.yaml"), []byte("---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runOpzero(t, "hub", "manifests", "-o", op)
	if err == nil || !strings.Contains(out+err.Error(), "holds an operator's manifests") {
		t.Errorf("writing into an operator's folder: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(op, "operator.yaml")); err != nil {
		t.Errorf("the operator's file is gone: %v", err)
	}
}

// TestHubAdoptBadInput: each wrong way of calling `opzero hub adopt` is an
// error that says what to give, and nothing is written.
func TestHubAdoptBadInput(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release.yaml")
	if err := os.WriteFile(release, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give the operator's objects one way"},
		{[]string{"-f", release, "--from-cluster", "--deployment", "ns/op"}, "give the operator's objects one way"},
		{[]string{"--from-cluster", "--deployment", "op"}, "--from-cluster needs --deployment <namespace>/<name>"},
		{[]string{"-f", release, "--owner", "Deployment"}, `--owner "Deployment": want Kind=<value>`},
		{[]string{"-f", release, "--events", "Widget"}, `--events "Widget": want Kind=created,updated,deleted`},
		{[]string{"-f", release, "--events", "Widget=created,patched"}, `--events Widget=created,patched: "patched" is no type of change; want created, updated, deleted`},
		{[]string{"-f", release}, "no Deployment in the input"},
		{[]string{"-f", filepath.Join(dir, "missing.yaml")}, "no such file"},
	} {
		out := filepath.Join(dir, "out.yaml")
		msg, err := runOpzero(t, append([]string{"hub", "adopt", "-o", out}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("opzero hub adopt %s: %v (%s), want an error with %q", strings.Join(c.args, " "), err, msg, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("opzero hub adopt %s wrote %s", strings.Join(c.args, " "), out)
		}
	}
}

// TestHubRunIsTheHub: `opzero hub run` runs the hub's own code with its
// flags (package hubcmd, as cmd/opzero-hub): the hub's checks answer, and
// the old names --replica-id and --webhook-in-flight still parse.
func TestHubRunIsTheHub(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	out, err := runOpzero(t, "hub", "run", "--buckets", "0", "--replica-id", "r", "--webhook-in-flight", "3")
	if err == nil || !strings.Contains(err.Error(), "--buckets 0: want 1 or more") {
		t.Fatalf("hub run --buckets 0: %v\n%s", err, out)
	}
	if _, err := runOpzero(t, "hub", "run", "--service-account", "no-slash"); err == nil || !strings.Contains(err.Error(), "want <namespace>/<name>") {
		t.Errorf("hub run --service-account no-slash: %v", err)
	}
}
