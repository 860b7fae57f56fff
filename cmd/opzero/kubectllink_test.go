package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkKubectl: install links the pinned kubectl beside the CLI, says
// so once it is there, moves an earlier install's link to the new pins,
// leaves a kubectl of the user's alone, and says what to type when it
// cannot link.
func TestLinkKubectl(t *testing.T) {
	root := t.TempDir()
	pins := func(name string) string {
		d := filepath.Join(root, "cache", "opzero", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "kubectl"), []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	cur, old := pins("new-pins"), pins("old-pins")
	link := func(t *testing.T, bindir string) string {
		t.Helper()
		var out bytes.Buffer
		linkKubectl(&out, bindir, cur)
		return out.String()
	}
	target := func(t *testing.T, l string) string {
		t.Helper()
		got, err := os.Readlink(l)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("fresh, then again", func(t *testing.T) {
		bin := t.TempDir()
		if out := link(t, bin); !strings.Contains(out, "linked "+filepath.Join(bin, "kubectl")) {
			t.Fatalf("printed %q", out)
		}
		if got := target(t, filepath.Join(bin, "kubectl")); got != filepath.Join(cur, "kubectl") {
			t.Fatalf("link to %s, want the pinned kubectl", got)
		}
		if out := link(t, bin); !strings.Contains(out, "is the pinned kubectl") {
			t.Fatalf("second install printed %q", out)
		}
	})
	t.Run("an earlier install's link", func(t *testing.T) {
		bin := t.TempDir()
		if err := os.Symlink(filepath.Join(old, "kubectl"), filepath.Join(bin, "kubectl")); err != nil {
			t.Fatal(err)
		}
		if out := link(t, bin); !strings.Contains(out, "now links to") {
			t.Fatalf("printed %q", out)
		}
		if got := target(t, filepath.Join(bin, "kubectl")); got != filepath.Join(cur, "kubectl") {
			t.Fatalf("link to %s, want the new pins'", got)
		}
	})
	t.Run("the user's own kubectl", func(t *testing.T) {
		bin := t.TempDir()
		own := filepath.Join(bin, "kubectl")
		if err := os.WriteFile(own, []byte("mine"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out := link(t, bin); !strings.Contains(out, "not opzero's: left alone") || !strings.Contains(out, filepath.Join(cur, "kubectl")) {
			t.Fatalf("printed %q", out)
		}
		if b, _ := os.ReadFile(own); string(b) != "mine" {
			t.Fatalf("the user's kubectl was changed: %q", b)
		}
	})
	t.Run("a folder that cannot take the link", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "no-such-folder")
		if out := link(t, bin); !strings.Contains(out, "could not link") || !strings.Contains(out, "ln -s "+filepath.Join(cur, "kubectl")) {
			t.Fatalf("printed %q", out)
		}
	})
}
