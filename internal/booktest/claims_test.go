package booktest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/controlplane"
)

// labNote is what a run log or a branch note says and a reference page does
// not: goals named by issue, an issue's number, a run's heading, a note to
// whoever merges, the page's own history.
var labNote = regexp.MustCompile(`Issue [0-9]+ goals|[Ii]ssue [0-9]{2}\b|(?m)^#+ Run [0-9]+|for the lead|the old line said`)

// memoryFigure is a figure in bytes; measure is a word that says which
// measure it is (RSS under opzero dev, kubelet's working set on the node, a
// heap, a binary's or an object's size).
var (
	memoryFigure = regexp.MustCompile(`\d\s*(MiB|MB|GiB|GB|KiB|kB)\b`)
	measure      = regexp.MustCompile(`(?i)RSS|working set|heap|binar(y|ies)|size|image|on disk|etcd|VmHWM`)
)

// readerPages are the README and every page of docs/: what a reader reads.
func readerPages(t *testing.T) map[string]string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, filepath.Join(root, "README.md"))
	pages := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, n)
		pages[rel] = string(b)
	}
	return pages
}

// labNotes are the lines of a page that read as a lab note.
func labNotes(page string) []string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if labNote.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// unmeasured are the paragraphs of a page with a memory figure whose
// section (from its heading), up to and with the paragraph, names no
// measure: a table's measure may be in the sentence before it.
func unmeasured(page string) []string {
	var out []string
	for _, sec := range regexp.MustCompile(`\n(?:#+ )`).Split(page, -1) {
		named := false
		for _, p := range regexp.MustCompile(`\n\s*\n`).Split(sec, -1) {
			named = named || measure.MatchString(p)
			if !named && memoryFigure.MatchString(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// resultsLinks counts the links to the lab notes (results/) of a page.
func resultsLinks(page string) int {
	return len(regexp.MustCompile(`\]\((\.\./)?results/`).FindAllString(page, -1))
}

// TestBookIsNoLabNote keeps run logs, branch notes and history out of the
// book: they go to results/, linked once, from docs/benchmarks.md.
func TestBookIsNoLabNote(t *testing.T) {
	links := 0
	for name, page := range readerPages(t) {
		for _, l := range labNotes(page) {
			t.Errorf("%s reads as a lab note (move it to results/): %s", name, l)
		}
		n := resultsLinks(page)
		if n > 0 && name != filepath.Join("docs", "benchmarks.md") {
			t.Errorf("%s links results/ %d times: the lab notes are linked once, from docs/benchmarks.md (name the file instead)", name, n)
		}
		links += n
	}
	if links != 1 {
		t.Errorf("results/ is linked %d times from the book; want once, from docs/benchmarks.md", links)
	}
}

// TestBookFiguresNameTheirMeasure: every memory figure of the book says
// which measure it is (docs/measuring.md says why it matters: RSS under
// opzero dev and the working set on a node give opposite verdicts for a
// small operator).
func TestBookFiguresNameTheirMeasure(t *testing.T) {
	for name, page := range readerPages(t) {
		for _, p := range unmeasured(page) {
			t.Errorf("%s: a memory figure names no measure (RSS under opzero dev, working set on the node, heap, size) in its section:\n%s", name, p)
		}
	}
}

// TestClaimChecksCatch: the checks above find what they are for.
func TestClaimChecksCatch(t *testing.T) {
	if got := labNotes("# Figures\n\n## Run 7 (2026-11-28)\n\nFine.\n"); len(got) != 1 {
		t.Errorf("a run heading: %q", got)
	}
	if got := labNotes("This closes issue 52.\n"); len(got) != 1 {
		t.Errorf("an issue's number: %q", got)
	}
	if got := labNotes("The hub at zero keeps 20 MiB.\n"); len(got) != 0 {
		t.Errorf("a reference line: %q", got)
	}
	page := "# A\n\nThe operator keeps 40.5 MiB at zero.\n\n# B\n\nRSS under opzero dev:\n\n| x | 12 MiB |\n"
	if got := unmeasured(page); len(got) != 1 || !strings.Contains(got[0], "40.5") {
		t.Errorf("unmeasured = %q, want the 40.5 MiB paragraph alone", got)
	}
	if got := unmeasured("# A\n\nThe hub holds 20 MiB by the node's working set.\n"); len(got) != 0 {
		t.Errorf("a named measure: %q", got)
	}
	if n := resultsLinks("see [runs](../results/runs.md) and [x](results/README.md)"); n != 2 {
		t.Errorf("resultsLinks = %d, want 2", n)
	}
}
