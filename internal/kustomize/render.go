package kustomize

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// File is the kustomization file of dir ("" when it has none): one of the
// names kustomize recognizes (kustomization.yaml, kustomization.yml,
// Kustomization).
func File(dir string) string {
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// Has says whether dir is a folder with a kustomization file.
func Has(dir string) bool { return File(dir) != "" }

// Render builds the kustomization in dir as `kustomize build dir` does and
// returns the objects as one multi-document YAML stream. A folder without a
// kustomization file, or one kustomize cannot build, is an error naming it.
func Render(dir string) ([]byte, error) {
	m, err := build(dir)
	if err != nil {
		return nil, err
	}
	b, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return b, nil
}

// objects builds the kustomization in dir (as Render) and returns its
// objects as maps.
func objects(dir string) ([]map[string]any, error) {
	m, err := build(dir)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, r := range m.Resources() {
		o, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		out = append(out, o)
	}
	return out, nil
}

func build(dir string) (resmap.ResMap, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("kustomize: %s is not a folder (-k takes the folder of a kustomization.yaml)", dir)
	}
	if !Has(dir) {
		return nil, fmt.Errorf("kustomize: %s has no kustomization.yaml (nor kustomization.yml, Kustomization)", dir)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return m, nil
}
