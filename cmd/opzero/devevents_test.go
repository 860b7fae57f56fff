package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/dev"
)

// TestDevEventsOnStdout: with --events=json, standard output carries only
// JSON events (here the error of manifests that do not parse, one line,
// one object) and the human log goes to standard error; with
// --events-file the events go to the file; an unknown format is refused
// before anything else happens.
func TestDevEventsOnStdout(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (stdout, stderr string, err error) {
		var o, e bytes.Buffer
		cmd := newRootCmd()
		cmd.SetOut(&o)
		cmd.SetErr(&e)
		cmd.SetArgs(args)
		err = cmd.Execute()
		return o.String(), e.String(), err
	}
	onlyError := func(t *testing.T, stream string) {
		t.Helper()
		lines := strings.Split(strings.TrimRight(stream, "\n"), "\n")
		if len(lines) != 1 {
			t.Fatalf("events %q: want one line", stream)
		}
		var e dev.Event
		if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
			t.Fatalf("event line %q: %v", lines[0], err)
		}
		if e.Event != dev.EventError || !strings.Contains(e.Message, "bad.yaml") || e.Time.IsZero() {
			t.Errorf("event %+v: want an error naming bad.yaml, with a time", e)
		}
	}

	stdout, _, err := run("dev", "-f", bad, "--events=json")
	if err == nil {
		t.Fatal("bad manifests: no error")
	}
	onlyError(t, stdout)

	file := filepath.Join(t.TempDir(), "events.jsonl")
	stdout, _, err = run("dev", "-f", bad, "--events=json", "--events-file", file)
	if err == nil {
		t.Fatal("bad manifests: no error")
	}
	if stdout != "" {
		t.Errorf("stdout %q with --events-file: want nothing (the human log is on stdout, and this run printed none)", stdout)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	onlyError(t, string(b))

	_, _, err = run("dev", "-f", bad, "--events=xml")
	if err == nil || !strings.Contains(err.Error(), "the only format is json") {
		t.Fatalf("--events=xml: %v, want a refusal naming json", err)
	}
}
