package depcheck

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may track: the biggest
// legitimate ones (a go.sum, a generated CRD, docs/benchmarks.md) are
// about 60 KB.
const maxTracked = 4 << 20

// executableMagic are the first bytes of the executables a build writes:
// ELF, and Mach-O for a build on a Mac (both byte orders, 32 and 64 bit).
var executableMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xfe, 0xed, 0xfa, 0xcf},
	{0xce, 0xfa, 0xed, 0xfe}, {0xcf, 0xfa, 0xed, 0xfe},
}

// TestNoBuildOutputsTracked: git tracks no file over maxTracked and no
// executable (two built binaries of 42 and 48 MB were once committed at the
// root), and the binaries `go build` writes into the checkout's root for
// each main package are ignored.
func TestNoBuildOutputsTracked(t *testing.T) {
	root := checkoutRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		f, err := os.Open(filepath.Join(root, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		head := make([]byte, 4)
		n, _ := io.ReadFull(f, head)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > maxTracked {
			t.Errorf("%s is tracked and %d MB (the limit is %d MB): `git rm --cached %s`, and ignore it in .gitignore if a build writes it",
				name, fi.Size()>>20, maxTracked>>20, name)
		}
		for _, m := range executableMagic {
			if bytes.Equal(head[:n], m) {
				t.Errorf("%s is a tracked executable: `git rm --cached %s` and ignore it in .gitignore", name, name)
			}
		}
	}

	mains, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(mains)) {
		bin := path.Base(p)
		if err := exec.Command("git", "-C", root, "check-ignore", "-q", bin).Run(); err != nil {
			t.Errorf("`go build ./%s` in the checkout's root writes %s, which .gitignore does not ignore: add /%s to it",
				strings.TrimPrefix(p, mod), bin, bin)
		}
	}
}

// checkoutRoot is the git work tree this package is in; the test is
// skipped outside one (a module copy without .git has nothing to track).
func checkoutRoot(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: nothing tells which files are tracked")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not in a git checkout: nothing is tracked")
	}
	return strings.TrimSpace(string(out))
}
