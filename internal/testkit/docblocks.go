package testkit

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// How a shell block of the docs is kept true, written after the fence's
// language (its info string: ```sh run). Every ```sh block of the README
// and of docs/ names one; a block a reader is not meant to type is not
// ```sh (```console for a session with its output, ```text, ```go, ...).
const (
	// MarkRun: the book's test (internal/booktest) runs the block, with the
	// page's other run blocks in order, in a clone of the checkout.
	MarkRun = "run"
	// MarkTest: test=NAME, the block is run by the test that reads block
	// NAME (BookBlock), in the folder that test prepares.
	MarkTest = "test"
	// MarkE2E: the block needs root and the real cluster: `make e2e-book`
	// runs it; under make test its commands are only checked (Checked).
	MarkE2E = "e2e"
	// MarkChecked: not run, its commands only checked (a make target
	// exists, an opzero command line parses, a package and a -run test
	// exist): make test itself, the benchmarks, anything that takes longer
	// than a test may. The page says why.
	MarkChecked = "checked"
)

// Block is one fenced code block of a Markdown page.
type Block struct {
	Path string // the page
	Line int    // of the opening fence, from 1
	Lang string // the info string's first word: sh, console, go, ...
	// Mark is how a sh block is kept true (MarkRun, MarkTest, ...), "" if
	// the info string names none.
	Mark string
	// Name is NAME of test=NAME.
	Name string
	// Terminal is 2 for terminal=2: the reader types the block in a second
	// terminal while the previous block's last command, one that runs
	// until Ctrl-C, keeps running in the first.
	Terminal int
	// Lines are the block's non-empty lines, as written; a line ending in a
	// backslash and the lines it continues are one.
	Lines []string
}

// Where names the block for messages: page:line.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.Path, b.Line) }

// Blocks returns the fenced code blocks of the Markdown file path, in order.
// A sh block whose info string names no mark, or names an unknown word, is
// an error: every command a reader is told to type says how it is kept true.
func Blocks(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Block
	var cur *Block
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case cur == nil && fence:
			b, err := parseInfo(path, n, strings.TrimPrefix(strings.TrimSpace(line), "```"))
			if err != nil {
				return nil, err
			}
			cur = &b
		case cur != nil && fence:
			if cur.Lang == "sh" && len(cur.Lines) == 0 {
				return nil, fmt.Errorf("%s: an empty sh block", cur.Where())
			}
			out = append(out, *cur)
			cur = nil
		case cur != nil && len(cur.Lines) > 0 && strings.HasSuffix(cur.Lines[len(cur.Lines)-1], "\\"):
			cur.Lines[len(cur.Lines)-1] += "\n" + line // a continued command is one line
		case cur != nil && strings.TrimSpace(line) != "":
			cur.Lines = append(cur.Lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: the block is not closed", cur.Where())
	}
	return out, nil
}

func parseInfo(path string, line int, info string) (Block, error) {
	b := Block{Path: path, Line: line, Terminal: 1}
	words := strings.Fields(info)
	if len(words) == 0 {
		return b, nil
	}
	b.Lang = words[0]
	if b.Lang != "sh" {
		return b, nil
	}
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch {
		case k == MarkTest && v != "":
			b.Mark, b.Name = MarkTest, v
		case (k == MarkRun || k == MarkE2E || k == MarkChecked) && v == "":
			if b.Mark != "" {
				return b, fmt.Errorf("%s:%d: ```%s names two marks", path, line, info)
			}
			b.Mark = k
		case k == "terminal" && v == "2":
			b.Terminal = 2
		default:
			return b, fmt.Errorf("%s:%d: ```%s: unknown word %q (want run, test=NAME, e2e, checked, terminal=2)", path, line, info, w)
		}
	}
	if b.Mark == "" {
		return b, fmt.Errorf("%s:%d: a ```sh block names no mark: ```sh run (the book's test runs it), test=NAME (a test reads it by name), e2e (root and the real cluster: make e2e-book) or checked (its commands are checked, not run); a block not meant to be typed is ```console or ```text", path, line)
	}
	if b.Terminal == 2 && b.Mark != MarkRun && b.Mark != MarkE2E {
		return b, fmt.Errorf("%s:%d: terminal=2 goes with run or e2e", path, line)
	}
	return b, nil
}

// Pages are the Markdown pages of the README and the book under the
// checkout root: README.md, then docs/ (its sub-folders too), by path.
func Pages(root string) ([]string, error) {
	pages := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	return pages, err
}

// BookBlock returns the command lines of the ```sh test=name block of the
// README or the book under root; a name that appears on several pages must
// read the same on each.
func BookBlock(root, name string) ([]string, error) {
	pages, err := Pages(root)
	if err != nil {
		return nil, err
	}
	var found []Block
	for _, p := range pages {
		bs, err := Blocks(p)
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			if b.Mark == MarkTest && b.Name == name {
				found = append(found, b)
			}
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no ```sh test=%s block in README.md or docs/", name)
	}
	for _, b := range found[1:] {
		if !slices.Equal(b.Lines, found[0].Lines) {
			return nil, fmt.Errorf("the ```sh test=%s blocks of %s and %s differ", name, found[0].Where(), b.Where())
		}
	}
	return found[0].Lines, nil
}
