// Command imagebuild writes container images into one docker-archive
// tarball (what `ctr -n k8s.io images import` loads) with
// go-containerregistry: each image is one uncompressed layer on an empty
// base (empty.Image, mutate.AppendLayers) holding an empty /tmp and the
// files its spec lists, with the folders above them, and a config with the
// spec's entrypoint, user and working folder (mutate.ConfigFile).
//
// It reads a Request as JSON on standard input and writes the Built images
// as JSON on standard output, in the order of the request's images.
// internal/devenv/image (the opzero module) says what each image holds
// and is tagged; this program only builds and writes them.
//
// The layer is reproducible: fixed modification times and owners, so the
// same files give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Request is what internal/devenv/image sends.
type Request struct {
	// File is the tarball written.
	File   string  `json:"file"`
	Images []Image `json:"images"`
}

// Image is one image, resolved: its reference, config and files.
type Image struct {
	Ref          string   `json:"ref"` // opzero.local/<name>:<tag>
	Architecture string   `json:"architecture"`
	Entrypoint   []string `json:"entrypoint"`
	User         string   `json:"user"`
	WorkDir      string   `json:"workDir"`
	// Files are sorted by Path, each Path once.
	Files []File `json:"files"`
}

// File is the content of Source (a host file; links followed) at Path
// (absolute, clean) with Mode (0755 or 0644).
type File struct {
	Path   string `json:"path"`
	Source string `json:"source"`
	Mode   int64  `json:"mode"`
}

// Built is one image written.
type Built struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"` // its config's digest (the image ID in containerd)
}

func main() {
	var req Request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fail(fmt.Errorf("reading the request on standard input: %w", err))
	}
	built, err := write(req)
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(built); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}

func write(req Request) ([]Built, error) {
	refs := map[name.Reference]v1.Image{}
	out := make([]Built, 0, len(req.Images))
	for _, im := range req.Images {
		ref, err := name.NewTag(im.Ref)
		if err != nil {
			return nil, err
		}
		img, err := build(im)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		d, err := img.ConfigName()
		if err != nil {
			return nil, err
		}
		refs[ref] = img
		out = append(out, Built{Ref: ref.String(), Digest: d.String()})
	}
	if err := tarball.MultiRefWriteToFile(req.File, refs); err != nil {
		return nil, fmt.Errorf("writing %s: %w", req.File, err)
	}
	return out, nil
}

func build(im Image) (v1.Image, error) {
	layerTar, err := layer(im.Files)
	if err != nil {
		return nil, err
	}
	// Stored, not compressed: the tarball only travels to containerd on
	// this machine, and gzip would take most of the time (minutes for
	// Knative's twelve images under the race detector).
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", im.Architecture
	cf.Config.Entrypoint = im.Entrypoint
	cf.Config.User = im.User
	cf.Config.WorkingDir = im.WorkDir
	return mutate.ConfigFile(img, cf)
}

// layer is an uncompressed tar holding /tmp and files (sorted by place),
// with the folders above them.
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
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: f.Mode, Size: int64(len(content)), ModTime: epoch}); err != nil {
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
