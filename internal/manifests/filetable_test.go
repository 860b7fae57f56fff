package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// kustomizationFile is the file -o writes beside the others for a folder
// under config/ (internal/kustomize writes it).
const kustomizationFile = "kustomization.yaml"

// bookFileRows are the file names of the first column of docs/manifests.md's
// table of the files opzero manifests writes ("| file | what |").
func bookFileRows(page string) []string {
	var out []string
	in := false
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	for _, l := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(l, "| file | what |"):
			in = true
		case in && !strings.HasPrefix(l, "|"):
			return out
		case in:
			if m := row.FindStringSubmatch(l); m != nil {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// TestBookFileTableMatchesCode keeps docs/manifests.md's table of files equal
// to the files opzero manifests writes (fileOrder, and the kustomization -o
// adds): a file added, renamed or dropped fails here until the page says so.
func TestBookFileTableMatchesCode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "manifests.md"))
	if err != nil {
		t.Fatal(err)
	}
	book := bookFileRows(string(b))
	sort.Strings(book)
	var code []string
	for f := range fileOrder {
		code = append(code, f)
	}
	code = append(code, kustomizationFile)
	sort.Strings(code)
	if strings.Join(book, " ") != strings.Join(code, " ") {
		t.Errorf("docs/manifests.md's file table lists %v; opzero manifests writes %v", book, code)
	}
}

func TestBookFileRows(t *testing.T) {
	page := "x\n\n| file | what |\n|---|---|\n| `a.yaml` | A |\n| `b.yaml` | B |\n\n| file | what |\n| `c.yaml` | no |\n"
	if got := bookFileRows(page); strings.Join(got, ",") != "a.yaml,b.yaml" {
		t.Errorf("bookFileRows = %q, want the first table's a.yaml, b.yaml", got)
	}
}
