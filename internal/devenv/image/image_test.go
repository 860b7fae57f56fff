package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	ref, _ := name.NewTag(built[0].Ref)
	img, err := tarball.ImageFromPath(tar, &ref)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != NonRoot || strings.Join(cf.Config.Entrypoint, " ") != "/hello serve" || cf.OS != "linux" {
		t.Errorf("config: user %q, entrypoint %q, os %q", cf.Config.User, cf.Config.Entrypoint, cf.OS)
	}
	again, err := Write(filepath.Join(dir, "again.tar"), Spec{Name: "hello", Binary: bin, Args: []string{"serve"}})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Digest != built[0].Digest {
		t.Errorf("digest %s then %s: not reproducible", built[0].Digest, again[0].Digest)
	}
}

func ExampleWrite() {
	built, err := Write("/tmp/images.tar", Spec{Name: "pause", Binary: "/path/to/static/pause"})
	if err != nil {
		return
	}
	_ = built[0].Ref // opzero.local/pause:<12 hex digits of the binary's SHA-256>; `ctr -n k8s.io images import /tmp/images.tar`
}
