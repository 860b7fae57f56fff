package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opzero/opzero/internal/kustomize"
	"github.com/opzero/opzero/internal/ownsource"
)

// metacontrollerFilesEnv is internal/metacontroller's FilesEnv: the
// controllers' YAML files or folders opzero-metacontroller describes
// itself from (the CLI does not link the operator's package for a name).
const metacontrollerFilesEnv = "OPZERO_METACONTROLLER_FILES"

// controllerResources are the kustomization resources, relative to out,
// that bring the controllers opzero-metacontroller serves along with its
// manifests: each folder of $OPZERO_METACONTROLLER_FILES that is a
// kustomization (Metacontroller's examples' manifest/ and v1/), or the
// kustomization folder of a file named there. kustomize takes no single
// file from outside its folder, so a file or plain folder outside out is
// said, not listed. Other operators: none.
func controllerResources(w io.Writer, out, pkg string) ([]string, error) {
	if !ownsource.Own(pkg) || !strings.HasSuffix(pkg, "/cmd/opzero-metacontroller") {
		return nil, nil
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	var res []string
	for _, e := range strings.Split(os.Getenv(metacontrollerFilesEnv), ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		abs, err := filepath.Abs(e)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("%s names %s: %w; nothing written", metacontrollerFilesEnv, e, err)
		}
		folder := abs
		if !st.IsDir() {
			folder = filepath.Dir(abs)
		}
		var r string
		switch {
		case kustomize.File(folder) != "":
			r = folder
		case within(absOut, abs):
			r = abs
		default:
			fmt.Fprintf(w, "warning: %s: not added to %s/kustomization.yaml: kustomize takes no file from outside its folder; give its folder a kustomization.yaml, or list it yourself\n", e, out)
			continue
		}
		if r == absOut {
			continue
		}
		rel, err := filepath.Rel(absOut, r)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(res, rel) {
			res = append(res, rel)
		}
	}
	return res, nil
}

// within reports whether path is dir or below it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
