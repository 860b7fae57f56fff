package depcheck

import (
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDesignMapMatchesTree: docs/design.md has one table row per Go package
// of the module, and no row for a package that is gone, so the map cannot
// silently go stale again.
func TestDesignMapMatchesTree(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	tree := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		tree[strings.TrimPrefix(p, mod)] = true
	}
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := designMapRows(string(doc))
	if len(listed) == 0 {
		t.Fatal("docs/design.md has no package rows (| `path` | ... |)")
	}
	var missing, gone []string
	for p := range tree {
		if !listed[p] {
			missing = append(missing, p)
		}
	}
	for p := range listed {
		if !tree[p] {
			gone = append(gone, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(gone)
	for _, p := range missing {
		t.Errorf("docs/design.md: no row for package %s: add one line saying what it is", p)
	}
	for _, p := range gone {
		t.Errorf("docs/design.md: row for %s, which is not a package of the tree: remove or rename it", p)
	}
}

var rowRE = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

func designMapRows(doc string) map[string]bool {
	rows := map[string]bool{}
	for _, m := range rowRE.FindAllStringSubmatch(doc, -1) {
		rows[m[1]] = true
	}
	return rows
}

// TestDesignMapRowsParse: the row parser sees package rows and nothing else.
func TestDesignMapRowsParse(t *testing.T) {
	got := designMapRows("| package | what | imports |\n|---|---|---|\n| `operator` | the `Runtime` | `builder` |\nprose with | `x` | inside\n")
	if len(got) != 1 || !got["operator"] {
		t.Fatalf("got %v, want only operator", got)
	}
}
