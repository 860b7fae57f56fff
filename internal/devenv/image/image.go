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
	// Binary is the file put into the image at /<base name of Binary>.
	Binary string
	// Args follow the binary in the entrypoint.
	Args []string
	// User defaults to NonRoot.
	User string
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

func build(s Spec) (v1.Image, name.Tag, error) {
	tag, err := Tag(s.Binary)
	if err != nil {
		return nil, name.Tag{}, err
	}
	ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", Registry, s.Name, tag))
	if err != nil {
		return nil, name.Tag{}, err
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, name.Tag{}, err
	}
	target := "/" + path.Base(s.Binary)
	layerTar, err := layer(target, bin)
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
	cf.Config.WorkingDir = "/"
	img, err = mutate.ConfigFile(img, cf)
	return img, ref, err
}

// layer is an uncompressed tar holding /tmp and the binary at target.
func layer(target string, bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: target[1:], Mode: 0o755, Size: int64(len(bin)), ModTime: epoch}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
