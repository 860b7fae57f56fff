package dev

import (
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// TestBuildIsStatic: a ko:// image is built as ko builds it, without cgo,
// so a local process starts and holds memory as the cluster's does. The
// package imports net, which links libc when cgo is on: the binary has an
// ELF interpreter then.
func TestBuildIsStatic(t *testing.T) {
	mod := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/static\n\ngo 1.22\n")
	write("main.go", "package main\n\nimport \"net\"\n\nfunc main() { _, _ = net.LookupHost(\"localhost\") }\n")
	t.Setenv("CGO_ENABLED", "1") // what a user's environment may say
	b := &builder{dir: t.TempDir(), buildDir: mod}
	argv, err := b.build(context.Background(), "example.com/static")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(argv[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s has an ELF interpreter: linked to libc, not built as ko builds", argv[0])
		}
	}
}
