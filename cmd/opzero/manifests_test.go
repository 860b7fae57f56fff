package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
// of files equal to the golden ones, the same as one stream on stdout.
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
	for _, name := range []string{"crds.yaml", "rbac.yaml", "operator.yaml", "sources.yaml", "wakeup-source.yaml"} {
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
	if len(entries) != 5 {
		t.Errorf("golden has %d files, want 5", len(entries))
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
		{[]string{"manifests", "./examples/configwatcher", "./bench/crbaseline"}, "accepts at most 1 arg"},
		{[]string{"manifests", "--operator", "./examples/configwatcher", "--mode", "lambda"}, "want serverless or classic"},
		{[]string{"manifests", "--operator", "./examples/configwatcher", "--timeout", "10ms"}, "at least 1s"},
		{[]string{"manifests", "--operator", "./nosuch"}, "Go package path of the operator's main"},
		{[]string{"manifests", "--operator", "./builder"}, "not a command"},
		{[]string{"manifests", "--operatr", "./examples/configwatcher"}, "unknown flag: --operatr"},
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
	for _, w := range []string{"OPZERO_DESCRIBE", "ApiServerSource", "least-privilege", "--mode", "deterministic"} {
		if !strings.Contains(help, w) {
			t.Errorf("help does not mention %q", w)
		}
	}
}
