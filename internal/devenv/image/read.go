package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// Image is an image read back from a tarball Write wrote: its config and
// its one layer.
type Image struct {
	OS, Architecture string
	Entrypoint       []string
	User, WorkDir    string
	// Layer is the image's layer, an uncompressed tar.
	Layer []byte
}

// Read reads the image ref (a Built.Ref) from the docker-archive tarball
// file, with the standard library only (manifest.json, the config and the
// layer it names).
func Read(file, ref string) (*Image, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		return nil, fmt.Errorf("manifest.json of %s: %w", file, err)
	}
	for _, m := range manifest {
		if !slices.Contains(m.RepoTags, ref) {
			continue
		}
		var cf struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
			Config       struct {
				Entrypoint []string
				User       string
				WorkingDir string
			} `json:"config"`
		}
		if err := json.Unmarshal(files[m.Config], &cf); err != nil {
			return nil, fmt.Errorf("config %s of %s in %s: %w", m.Config, ref, file, err)
		}
		if len(m.Layers) != 1 {
			return nil, fmt.Errorf("%s in %s has %d layers, want 1", ref, file, len(m.Layers))
		}
		layer := files[m.Layers[0]]
		if zr, err := gzip.NewReader(bytes.NewReader(layer)); err == nil {
			if layer, err = io.ReadAll(zr); err != nil {
				return nil, fmt.Errorf("layer of %s in %s: %w", ref, file, err)
			}
		} else if !errors.Is(err, gzip.ErrHeader) {
			return nil, fmt.Errorf("layer of %s in %s: %w", ref, file, err)
		}
		return &Image{OS: cf.OS, Architecture: cf.Architecture, Entrypoint: cf.Config.Entrypoint,
			User: cf.Config.User, WorkDir: cf.Config.WorkingDir, Layer: layer}, nil
	}
	return nil, fmt.Errorf("%s holds no image %s", file, ref)
}
