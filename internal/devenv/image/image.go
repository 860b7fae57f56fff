package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"

	"github.com/opzero/opzero/internal/devenv/pinned"
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
// tarball at file. It returns the references in the order of specs. It is
// WriteWith with the zero pinned.Resolver: the image builder is found (and
// built the first time) like every pinned binary.
func Write(file string, specs ...Spec) ([]Built, error) {
	return WriteWith(context.Background(), pinned.Resolver{}, file, specs...)
}

// WriteWith is Write with the pinned.Resolver that finds the image builder
// (pinned.ImageBuild, tools/imagebuild: go-containerregistry in a module of
// its own) and a context that stops it.
func WriteWith(ctx context.Context, r pinned.Resolver, file string, specs ...Spec) ([]Built, error) {
	req := request{File: file, Images: make([]resolved, 0, len(specs))}
	for _, s := range specs {
		im, err := s.resolve()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		req.Images = append(req.Images, im)
	}
	prog, err := r.FindOne(ctx, pinned.ImageBuild)
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("writing %s with %s: %w: %s", file, prog, err, strings.TrimSpace(stderr.String()))
	}
	var out []Built
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out) != len(specs) {
		return nil, fmt.Errorf("writing %s with %s: want %d images as JSON on its output, got %q (%v)", file, prog, len(specs), stdout.String(), err)
	}
	return out, nil
}

// request is what tools/imagebuild reads on its standard input: each
// image resolved (reference, config, files and their modes).
type request struct {
	File   string     `json:"file"`
	Images []resolved `json:"images"`
}

type resolved struct {
	Ref          string      `json:"ref"`
	Architecture string      `json:"architecture"`
	Entrypoint   []string    `json:"entrypoint"`
	User         string      `json:"user"`
	WorkDir      string      `json:"workDir"`
	Files        []layerFile `json:"files"`
}

// layerFile is one file of the layer: Source's content at Path (clean,
// absolute; the files sorted by it) with Mode.
type layerFile struct {
	Path   string `json:"path"`
	Source string `json:"source"`
	Mode   int64  `json:"mode"`
}

// resolve is what tools/imagebuild builds for s: its reference (the tag
// hashes the files), entrypoint, user, working folder, and every file with
// its mode in the layer (0755 for the binary and executables, else 0644).
func (s Spec) resolve() (resolved, error) {
	tag, err := s.tag()
	if err != nil {
		return resolved{}, err
	}
	ref := fmt.Sprintf("%s/%s:%s", Registry, s.Name, tag)
	im := resolved{Ref: ref, Architecture: runtime.GOARCH, Entrypoint: append([]string{s.target()}, s.Args...), User: s.User, WorkDir: s.WorkDir}
	if im.User == "" {
		im.User = NonRoot
	}
	if im.WorkDir == "" {
		im.WorkDir = "/"
	}
	for _, f := range s.all() {
		st, err := os.Stat(f.Source)
		if err != nil {
			return resolved{}, err
		}
		if !st.Mode().IsRegular() {
			return resolved{}, fmt.Errorf("%s (for %s) is not a regular file", f.Source, f.Path)
		}
		mode := int64(0o644)
		if f.exec || st.Mode().Perm()&0o111 != 0 {
			mode = 0o755
		}
		im.Files = append(im.Files, layerFile{Path: f.Path, Source: f.Source, Mode: mode})
	}
	return im, nil
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
