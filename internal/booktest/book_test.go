package booktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/testkit"
)

// namedBlocks are the ```sh test=NAME blocks and the tests that run them
// (package folder: test name).
var namedBlocks = map[string][]string{
	"install": {"internal/scaffold:TestReadmeNewProject", "examples/kubebuilder:TestReadmeAdoptProject"},
	"new":     {"internal/scaffold:TestReadmeNewProject"},
	"adopt":   {"examples/kubebuilder:TestReadmeAdoptProject"},
}

// e2eEnv makes TestBook run the pages with e2e blocks (make e2e-book).
const e2eEnv = "OPZERO_E2E_BOOK"

// ready is what a command that runs until Ctrl-C prints once it is ready
// (opzero dev, make dev).
const ready = "opzero dev: ready"

// TestBook keeps the README and the book true (see the package doc): every
// sh block says how it is kept true, named blocks have their tests, checked
// and e2e blocks' commands resolve, links lead somewhere and the index
// links every page; then, unless -short, each page's run blocks run as a
// reader would type them. With OPZERO_E2E_BOOK=1 (make e2e-book, root) it
// runs the pages that have e2e blocks instead.
func TestBook(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pages, err := testkit.Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	cli := buildCLI(t, root)
	blocks := map[string][]testkit.Block{}
	for _, p := range pages {
		bs, err := testkit.Blocks(p)
		if err != nil {
			t.Error(err)
			continue
		}
		blocks[p] = bs
	}
	checkNamedBlocks(t, root, blocks)
	checkLinks(t, root, pages)
	e2e := os.Getenv(e2eEnv) != ""
	for _, p := range pages {
		for _, b := range blocks[p] {
			if b.Mark == testkit.MarkChecked || b.Mark == testkit.MarkE2E && !e2e {
				for _, line := range b.Lines {
					if err := checkLine(root, cli, line); err != nil {
						t.Errorf("%s: %q: %v", b.Where(), line, err)
					}
				}
			}
		}
	}
	if t.Failed() || testing.Short() {
		return
	}
	// Pages run in parallel (most of their time is spent waiting: for a
	// control plane, a cold start, a scale to zero), except those that
	// start the plane of `opzero controlplane up` on its default port,
	// which take turns.
	var defaultPort sync.Mutex
	for _, p := range pages {
		var run []testkit.Block
		hasE2E := false
		for _, b := range blocks[p] {
			hasE2E = hasE2E || b.Mark == testkit.MarkE2E
			if b.Mark == testkit.MarkRun || e2e && b.Mark == testkit.MarkE2E {
				run = append(run, b)
			}
		}
		if len(run) == 0 || e2e && !hasE2E {
			continue
		}
		rel, _ := filepath.Rel(root, p)
		name := strings.TrimPrefix(filepath.ToSlash(rel), "docs/") // TestBook/tutorial.md
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if usesDefaultPort(run) {
				defaultPort.Lock()
				defer defaultPort.Unlock()
			}
			runPage(t, root, cli, run)
		})
	}
}

// usesDefaultPort says whether blocks start `opzero controlplane up`
// without --port: the plane then serves on 16443, one at a time.
func usesDefaultPort(blocks []testkit.Block) bool {
	for _, b := range blocks {
		for _, l := range b.Lines {
			if strings.Contains(l, "controlplane up") && !strings.Contains(l, "--port") {
				return true
			}
		}
	}
	return false
}

// runPage runs a page's blocks in a clone of the checkout with a new
// user's environment, and stops the control plane the page may have left.
func runPage(t *testing.T, root, cli string, blocks []testkit.Block) {
	clone := cloneCheckout(t, root)
	env := testkit.ReadmeEnv(t, root)
	home := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	if os.Geteuid() == 0 {
		// root runs what the page types with sudo as it is (Debian's
		// containers have no sudo)
		shim := t.TempDir()
		if err := os.WriteFile(filepath.Join(shim, "sudo"), []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i, kv := range env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				env[i] = "PATH=" + v + string(os.PathListSeparator) + shim
			}
		}
	}
	t.Cleanup(func() {
		// a page that failed half-way may leave its control plane running
		down := exec.Command(cli, "controlplane", "down", "--dir", filepath.Join(home, ".opzero", "controlplane"))
		down.Env = env
		_ = down.Run()
		if os.Getenv(e2eEnv) != "" && t.Failed() {
			// and its cluster: the machine's network and kernel settings
			// come back (cluster down with no cluster says so and is done)
			down := exec.Command(cli, "cluster", "down")
			down.Env = env
			_ = down.Run()
		}
	})
	out := testkit.RunBlocks(t, clone, env, ready, blocks)
	t.Logf("%s:\n%s", blocks[0].Path, testkit.Tail([]byte(out), 60))
}

// cloneCheckout is what a reader has after cloning: a folder with the
// checkout's top-level entries linked, without bin/ (make fills it) and
// .git, so that what the page writes (bin/, deploy/) lands in the clone.
func cloneCheckout(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", ".git", "out", "deploy", "deploy-classic":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildCLI builds the opzero CLI of the tree: the checks parse command
// lines with it, and the cleanup stops a control plane with it.
func buildCLI(t *testing.T, root string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "opzero")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/opzero")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/opzero: %v\n%s", err, b)
	}
	return out
}

// checkNamedBlocks: every test=NAME block is one namedBlocks knows, each
// known name has a block, blocks of one name read the same, and the tests
// that run them exist.
func checkNamedBlocks(t *testing.T, root string, blocks map[string][]testkit.Block) {
	seen := map[string]bool{}
	for _, bs := range blocks {
		for _, b := range bs {
			if b.Mark != testkit.MarkTest {
				continue
			}
			if namedBlocks[b.Name] == nil {
				t.Errorf("%s: no test runs the block test=%s: add one, and its name to namedBlocks", b.Where(), b.Name)
			}
			seen[b.Name] = true
		}
	}
	for name, tests := range namedBlocks {
		if !seen[name] {
			t.Errorf("no ```sh test=%s block in README.md or docs/, which %v run", name, tests)
			continue
		}
		if _, err := testkit.BookBlock(root, name); err != nil {
			t.Error(err)
		}
		for _, pt := range tests {
			pkg, test, _ := strings.Cut(pt, ":")
			if err := testExists(filepath.Join(root, pkg), test); err != nil {
				t.Errorf("block test=%s: %v", name, err)
			}
		}
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// checkLinks: every relative link of a page leads to a file or folder that
// exists, and the book's index links every page of docs/.
func checkLinks(t *testing.T, root string, pages []string) {
	index := filepath.Join(root, "docs", "README.md")
	linked := map[string]bool{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(b), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs := p
			if target != "" {
				abs = filepath.Join(filepath.Dir(p), target)
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s: the link %s leads nowhere", p, m[1])
				continue
			}
			if anchor != "" && strings.HasSuffix(abs, ".md") && !anchors(t, abs)[anchor] {
				t.Errorf("%s: the link %s names no heading of %s", p, m[1], abs)
			}
			if p == index {
				linked[abs] = true
			}
		}
	}
	if _, err := os.Stat(index); err != nil {
		t.Fatalf("the book has no index: %v", err)
	}
	for _, p := range pages {
		if strings.HasPrefix(p, filepath.Join(root, "docs")+string(filepath.Separator)) && p != index && !linked[p] {
			t.Errorf("the index docs/README.md does not link %s", p)
		}
	}
}

// anchors are the fragment names GitHub gives the headings of the Markdown
// file path: lower case, punctuation dropped, spaces as hyphens.
func anchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		out[slug.String()] = true
	}
	return out
}
