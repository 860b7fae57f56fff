package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is the registry part of every image reference this package
// makes; nothing is ever pulled from it.
const Registry = "opzero.local"

// NonRoot is the user images run as.
const NonRoot = "65532:65532"

// Spec is one image: a static binary and how it is started.
type Spec struct {
	// Name is the repository under Registry ("pause": opzero.local/pause).
	Name string
	// Binary is the file put into the image at Path.
	Binary string
	// Path is where Binary is in the image; /<base name of Binary> if empty.
	Path string
	// Args follow the binary in the entrypoint.
	Args []string
	// User defaults to NonRoot.
	User string
	// Files are more files in the image (a dynamically linked program's
	// libraries, an interpreter's standard library, a script). With
	// Files, the tag is the hash of every file and its place, not of
	// Binary alone.
	Files []File
	// WorkDir defaults to /.
	WorkDir string
}

// File is one more file of an image: the content of Source (a host
// file; symbolic links followed) at Path.
type File struct {
	Path   string
	Source string
	exec   bool // the binary: always executable
}

// Built is an image written by Write.
type Built struct {
	Ref    string // opzero.local/<name>:<tag>
	Digest string // the image's digest (its config's ID in containerd)
}

// Tag is the tag of the image of binary: the first 12 hex digits of its
// SHA-256.
func Tag(binary string) (string, error) {
	f, err := os.Open(binary)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// Write builds every spec's image and writes them into one docker-archive
// tarball at file. It returns the references in the order of specs.
func Write(file string, specs ...Spec) ([]Built, error) {
	refs := map[name.Reference]v1.Image{}
	out := make([]Built, 0, len(specs))
	for _, s := range specs {
		img, ref, err := build(s)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		d, err := img.ConfigName()
		if err != nil {
			return nil, err
		}
		refs[ref] = img
		out = append(out, Built{Ref: ref.String(), Digest: d.String()})
	}
	if err := tarball.MultiRefWriteToFile(file, refs); err != nil {
		return nil, fmt.Errorf("writing %s: %w", file, err)
	}
	return out, nil
}

// tag is s's tag: Tag(s.Binary) for a binary alone, else the first 12
// hex digits of the SHA-256 of every file's place, mode and content.
func (s Spec) tag() (string, error) {
	if len(s.Files) == 0 {
		return Tag(s.Binary)
	}
	h := sha256.New()
	for _, f := range s.all() {
		st, err := os.Stat(f.Source)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", f.Path, st.Mode().Perm(), st.Size())
		r, err := os.Open(f.Source)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return "", err
		}
	}
	fmt.Fprintf(h, "%q %q %q", s.Args, s.User, s.WorkDir)
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// target is where the binary is in the image.
func (s Spec) target() string {
	if s.Path != "" {
		return s.Path
	}
	return "/" + path.Base(s.Binary)
}

// all is the binary and Files, sorted by place, each place once (the
// first wins).
func (s Spec) all() []File {
	files := append([]File{{Path: s.target(), Source: s.Binary, exec: true}}, s.Files...)
	seen := map[string]bool{}
	out := files[:0:0]
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if !seen[p] {
			seen[p] = true
			out = append(out, File{Path: p, Source: f.Source, exec: f.exec})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func build(s Spec) (v1.Image, name.Tag, error) {
	tag, err := s.tag()
	if err != nil {
		return nil, name.Tag{}, err
	}
	ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", Registry, s.Name, tag))
	if err != nil {
		return nil, name.Tag{}, err
	}
	target := s.target()
	layerTar, err := layer(s.all())
	if err != nil {
		return nil, name.Tag{}, err
	}
	// Stored, not compressed: the tarball only travels to containerd on
	// this machine, and gzip would take most of the time (minutes for
	// Knative's twelve images under the race detector).
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		return nil, name.Tag{}, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, name.Tag{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, name.Tag{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = append([]string{target}, s.Args...)
	cf.Config.User = s.User
	if cf.Config.User == "" {
		cf.Config.User = NonRoot
	}
	cf.Config.WorkingDir = s.WorkDir
	if cf.Config.WorkingDir == "" {
		cf.Config.WorkingDir = "/"
	}
	img, err = mutate.ConfigFile(img, cf)
	return img, ref, err
}

// layer is an uncompressed tar holding /tmp and files (sorted by
// place), with the folders above them.
func layer(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	dirs := map[string]bool{"tmp": true}
	for _, f := range files {
		rel := strings.TrimPrefix(f.Path, "/")
		var parents []string
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			dirs[parents[i]] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parents[i] + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		content, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(f.Source)
		if err != nil {
			return nil, err
		}
		mode := int64(0o644)
		if f.exec || st.Mode().Perm()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: mode, Size: int64(len(content)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
