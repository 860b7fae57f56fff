package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writePage(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBlocksNeedAMark: a sh block that says nothing of how it is kept true
// is refused, and so is an unknown word; other languages need none.
func TestBlocksNeedAMark(t *testing.T) {
	for text, ok := range map[string]bool{
		"```sh\nmake test\n```\n":                  false,
		"```sh runs\nmake test\n```\n":             false,
		"```sh run checked\nmake test\n```\n":      false,
		"```sh checked terminal=2\nmake\n```\n":    false,
		"```sh run\nmake test\n```\n":              true,
		"```sh test=new\nmake test\n```\n":         true,
		"```console\n$ make test\n```\n":           true,
		"```\nplain\n```\n```go\nx := 1\n```\n":    true,
		"```sh e2e terminal=2\nkubectl get\n```\n": true,
	} {
		_, err := Blocks(writePage(t, text))
		if (err == nil) != ok {
			t.Errorf("%q: error %v, want ok %v", text, err, ok)
		}
	}
}

// TestRunBlocksSecondTerminal: a command that runs until Ctrl-C keeps
// running while the terminal=2 blocks after it run, in a shell that has
// neither the first terminal's exports nor its working folder, and is then
// stopped with SIGINT; the first terminal's next block runs after it.
func TestRunBlocksSecondTerminal(t *testing.T) {
	page := writePage(t, "```sh run\n"+
		"export FIRST=1\n"+
		"mkdir sub && cd sub\n"+
		"sh -c 'trap \"echo got-ctrl-c; exit 0\" INT; echo opzero dev: ready; while :; do sleep 0.05; done'   # runs until Ctrl-C\n"+
		"```\n"+
		"```sh run terminal=2\n"+
		"test -z \"${FIRST:-}\" && test -d sub && echo second-terminal-ran\n"+
		"```\n"+
		"```sh run\n"+
		"echo back-in-first-$FIRST-$(basename $PWD)\n"+
		"```\n")
	bs, err := Blocks(page)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := RunBlocks(t, dir, os.Environ(), "opzero dev: ready", bs)
	i1, i2, i3 := strings.Index(out, "second-terminal-ran"), strings.Index(out, "got-ctrl-c"), strings.Index(out, "back-in-first-1-sub")
	if i1 < 0 || i2 < 0 || i3 < 0 || !(i1 < i3) {
		t.Errorf("want the second terminal's line, then Ctrl-C's, then the first terminal's next block:\n%s", out)
	}
}

// TestBlocksJoinContinuedLines: a command continued with a backslash is one
// line, run as one.
func TestBlocksJoinContinuedLines(t *testing.T) {
	bs, err := Blocks(writePage(t, "```sh run\necho a \\\n    b\necho c\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || len(bs[0].Lines) != 2 || bs[0].Lines[0] != "echo a \\\n    b" {
		t.Fatalf("lines %q", bs[0].Lines)
	}
	if out := RunBlocks(t, t.TempDir(), os.Environ(), "", bs); !strings.Contains(out, "\na b\n") {
		t.Errorf("the continued command did not run as one:\n%s", out)
	}
}
