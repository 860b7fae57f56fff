package depcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// oldImageSpec is a project that requires an older OCI image-spec than
// go-containerregistry does (v1.0.2 and go-digest through a real import),
// with the go.sum lines of both, so tidy asks no checksum database.
const (
	oldImageSpecMod = `module example.com/oldspec

go 1.24.0

require github.com/opencontainers/image-spec v1.0.2

require github.com/opencontainers/go-digest v1.0.0 // indirect
`
	oldImageSpecSum = `github.com/opencontainers/go-digest v1.0.0 h1:apOUWs51W5PlhuyGyz9FCeeBIOUDA/6nW8Oi/yOhh5U=
github.com/opencontainers/go-digest v1.0.0/go.mod h1:0JzlMkj0TRzQZfJkVvzbP0HBR3IKzErnv2BNG4W4MAM=
github.com/opencontainers/image-spec v1.0.2 h1:9yCKha/T5XdGtO0q9Q9a6T5NUCsTn/DrBg0D7ufOcFM=
github.com/opencontainers/image-spec v1.0.2/go.mod h1:BtxoFyWECRxE4U/7sNtV5W15zMzWCbyJoFRP3s7yZA0=
`
	oldImageSpecMain = `package main

import v1 "github.com/opencontainers/image-spec/specs-go/v1"
%s
func main() { _ = v1.MediaTypeImageLayer }
`
	// what an adopted project imports of opzero
	adoptedImports = `
import (
	_ "github.com/opzero/opzero/builder"
	_ "github.com/opzero/opzero/operator"
	_ "github.com/opzero/opzero/operator/classic"
	_ "github.com/opzero/opzero/reconcileutil"
)
`
)

// TestAdoptingMovesNoRequirement (issue 54): a project on image-spec v1.0.2
// that requires opzero (replaced by this checkout) and imports what an
// adopted project imports keeps every requirement it had after `go mod
// tidy`: opzero's go.mod requires no go-containerregistry (the CLI's
// images are written by tools/imagebuild, a module of its own), which
// moved image-spec to v1.1.0.
func TestAdoptingMovesNoRequirement(t *testing.T) {
	if testing.Short() {
		t.Skip("go mod tidy of a project that requires opzero (the Go module proxy the first time)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rootSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	write("go.mod", oldImageSpecMod)
	write("go.sum", oldImageSpecSum)
	write("main.go", strings.Replace(oldImageSpecMain, "%s", "", 1))
	goCmd("mod", "tidy") // the project as it is: tidy already
	before := parseMod(t, filepath.Join(dir, "go.mod"))

	write("main.go", strings.Replace(oldImageSpecMain, "%s", adoptedImports, 1))
	write("go.sum", oldImageSpecSum+string(rootSum)) // opzero's graph: no checksum database asked
	goCmd("mod", "edit", "-require", "github.com/opzero/opzero@v0.0.0", "-replace", "github.com/opzero/opzero="+root)
	goCmd("mod", "tidy")
	after := parseMod(t, filepath.Join(dir, "go.mod"))

	if before.Go.Version != after.Go.Version {
		t.Errorf("the go directive went from %s to %s", before.Go.Version, after.Go.Version)
	}
	now := map[string]string{}
	for _, r := range after.Require {
		now[r.Mod.Path] = r.Mod.Version
	}
	if v := now["github.com/opencontainers/image-spec"]; v != "v1.0.2" {
		t.Errorf("github.com/opencontainers/image-spec v1.0.2 became %q", v)
	}
	var moved []string
	for _, r := range before.Require {
		if v := now[r.Mod.Path]; v != r.Mod.Version {
			moved = append(moved, r.Mod.Path+" "+r.Mod.Version+" -> "+v)
		}
	}
	if len(moved) > 0 {
		t.Errorf("adopting opzero moved %d of the project's %d requirements: %s", len(moved), len(before.Require), strings.Join(moved, ", "))
	}
	t.Logf("%d of %d requirements kept (image-spec %s), %d added (opzero and what only it needs)",
		len(before.Require)-len(moved), len(before.Require), now["github.com/opencontainers/image-spec"], len(after.Require)-len(before.Require))
}

func parseMod(t *testing.T, path string) *modfile.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
