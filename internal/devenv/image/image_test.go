package image

import (
	archivetar "archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestWrite: a binary's image is tagged by its hash, runs it as 65532
// with the given arguments, and the same binary gives the same digest.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, []byte("#!/not/really\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tag, err := Tag(bin)
	if err != nil {
		t.Fatal(err)
	}
	tar := filepath.Join(dir, "images.tar")
	built, err := Write(tar, Spec{Name: "hello", Binary: bin, Args: []string{"serve"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "opzero.local/hello:" + tag; built[0].Ref != want || len(tag) != 12 {
		t.Fatalf("ref %s, want %s", built[0].Ref, want)
	}
	_, cf := load(t, tar, built[0].Ref)
	if cf.User != NonRoot || strings.Join(cf.Entrypoint, " ") != "/hello serve" || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config: user %q, entrypoint %q, os %q, architecture %q", cf.User, cf.Entrypoint, cf.OS, cf.Architecture)
	}
	again, err := Write(filepath.Join(dir, "again.tar"), Spec{Name: "hello", Binary: bin, Args: []string{"serve"}})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Digest != built[0].Digest {
		t.Errorf("digest %s then %s: not reproducible", built[0].Digest, again[0].Digest)
	}
}

// load reads the image ref back from the tarball tar (Read).
func load(t *testing.T, tar, ref string) ([]byte, *Image) {
	t.Helper()
	img, err := Read(tar, ref)
	if err != nil {
		t.Fatal(err)
	}
	return img.Layer, img
}

func ExampleWrite() {
	built, err := Write("/tmp/images.tar", Spec{Name: "pause", Binary: "/path/to/static/pause"})
	if err != nil {
		return
	}
	_ = built[0].Ref // opzero.local/pause:<12 hex digits of the binary's SHA-256>; `ctr -n k8s.io images import /tmp/images.tar`
}

// TestWriteFiles: a program with more files is placed where Path says,
// the files at theirs, the folders above them made; the tag hashes the
// files, so a changed file is a new tag.
func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	bin, lib := filepath.Join(dir, "interp"), filepath.Join(dir, "lib.so")
	for f, content := range map[string]string{bin: "#!/not/really\n", lib: "lib"} {
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := Spec{Name: "cmd/x", Binary: bin, Path: "/usr/bin/interp", Args: []string{"s.py"}, WorkDir: "/app",
		Files: []File{{Path: "/usr/lib/x/lib.so", Source: lib}, {Path: "/app/s.py", Source: lib}}}
	tar := filepath.Join(dir, "x.tar")
	built, err := Write(tar, spec)
	if err != nil {
		t.Fatal(err)
	}
	layer, cf := load(t, tar, built[0].Ref)
	if strings.Join(cf.Entrypoint, " ") != "/usr/bin/interp s.py" || cf.WorkDir != "/app" {
		t.Errorf("entrypoint %q in %q", cf.Entrypoint, cf.WorkDir)
	}
	tr := archivetar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, fmt.Sprintf("%s %o", h.Name, h.Mode))
	}
	want := "tmp/ 1777,app/ 755,app/s.py 644,usr/ 755,usr/bin/ 755,usr/bin/interp 755,usr/lib/ 755,usr/lib/x/ 755,usr/lib/x/lib.so 644"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("layer:\n got %s\nwant %s", got, want)
	}
	if err := os.WriteFile(lib, []byte("lib 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := Write(filepath.Join(dir, "y.tar"), spec)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Ref == built[0].Ref {
		t.Errorf("a changed file kept the tag %s", built[0].Ref)
	}
}
