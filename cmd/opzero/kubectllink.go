package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// linkKubectl makes the pinned kubectl reachable as the docs type it,
// `kubectl`: a symbolic link named kubectl beside the opzero executable
// (bindir), to the one install put in dir. The README has the user put the
// folder `go install` writes opzero into on PATH, so kubectl is then on
// PATH too, at the control plane's version. A kubectl already there that
// is not opzero's is left alone, and a folder that cannot be written is
// said, with the command that links it; so is another kubectl earlier on
// PATH. It reports what it did or why not.
func linkKubectl(out io.Writer, bindir, dir string) {
	pinnedPath := filepath.Join(dir, "kubectl")
	link := filepath.Join(bindir, "kubectl")
	if same(link, pinnedPath) {
		fmt.Fprintf(out, "kubectl: %s is the pinned kubectl\n", link)
	} else if target, err := os.Readlink(link); err == nil && isOurs(target) {
		// an earlier install's link (other pins): point it at these
		if err := replaceLink(link, pinnedPath); err != nil {
			fmt.Fprintf(out, "kubectl: could not point %s at %s: %v (ln -sf %s %s)\n", link, pinnedPath, err, pinnedPath, link)
			return
		}
		fmt.Fprintf(out, "kubectl: %s now links to %s\n", link, pinnedPath)
	} else if _, err := os.Lstat(link); err == nil {
		fmt.Fprintf(out, "kubectl: %s exists and is not opzero's: left alone; the pinned kubectl is %s\n", link, pinnedPath)
		return
	} else if err := os.Symlink(pinnedPath, link); err != nil {
		fmt.Fprintf(out, "kubectl: could not link %s (%v): the pinned kubectl is %s (ln -s %s %s, or put %s on PATH)\n", link, err, pinnedPath, pinnedPath, link, dir)
		return
	} else {
		fmt.Fprintf(out, "kubectl: linked %s to %s (beside opzero: on PATH with it)\n", link, pinnedPath)
	}
	if found, err := exec.LookPath("kubectl"); err == nil && !same(found, pinnedPath) {
		fmt.Fprintf(out, "kubectl: note: `kubectl` on your PATH is %s, not the pinned one; run %s, or put %s first on PATH\n", found, link, bindir)
	} else if errors.Is(err, exec.ErrNotFound) {
		fmt.Fprintf(out, "kubectl: note: %s is not on your PATH: add it (export PATH=%s:$PATH) to type opzero and kubectl\n", bindir, bindir)
	}
}

// same reports whether a and b are the same file (after links).
func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// isOurs: target is a kubectl in an opzero cache folder of other pins
// (<cache>/opzero/<pins>/kubectl).
func isOurs(target string) bool {
	return filepath.Base(target) == "kubectl" && filepath.Base(filepath.Dir(filepath.Dir(target))) == "opzero"
}

func replaceLink(link, target string) error {
	tmp := link + ".opzero-new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}
