package manifests

import (
	"encoding/json"
	"slices"
	"sort"

	"bufio"
	"bytes"
	"fmt"
	"io"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"os"
	"path/filepath"
	"sigs.k8s.io/yaml"
	"strings"
)

// ProjectCRDOptions reads the options a project gives controller-gen's
// crd generator in its Makefile (kubebuilder's manifests target:
// `$(CONTROLLER_GEN) rbac:roleName=manager-role crd:maxDescLen=0 webhook
// paths="./..." ...`): "maxDescLen=0", or "" when it gives none or has no
// Makefile. The file it read is returned for messages.
func ProjectCRDOptions(root string) (options, file string, err error) {
	path := filepath.Join(root, "Makefile")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", "", nil
	}
	if err != nil {
		return "", path, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "CONTROLLER_GEN)") && !strings.Contains(line, "controller-gen ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			f = strings.Trim(f, `"'`)
			if o, ok := strings.CutPrefix(f, "crd:"); ok {
				return o, path, nil
			}
		}
	}
	return "", path, sc.Err()
}

// clientSideApplyLimit is the API server's bound on all of an object's
// annotations (262144 bytes), where client-side `kubectl apply` keeps a
// copy of the whole object.
const clientSideApplyLimit = 256 << 10

// warnLargeCRDs warns of each CRD too large for client-side apply.
func warnLargeCRDs(w io.Writer, crds []GeneratedCRD, optionsFrom string) {
	if w == nil {
		return
	}
	for _, c := range crds {
		if len(c.YAML) < clientSideApplyLimit*9/10 { // the annotation holds it as JSON, about as long
			continue
		}
		fix := "give controller-gen crd:maxDescLen=0 in the project's Makefile (opzero manifests uses the options it finds there)"
		if optionsFrom != "" {
			fix = "it was generated with the options of " + optionsFrom + "; add maxDescLen=0 there"
		}
		fmt.Fprintf(w, "warning: CRD %s is %d KiB: client-side kubectl apply (-k, -f) keeps a copy in an annotation limited to 256 KiB and would fail "+
			"(metadata.annotations: Too long); apply with kubectl apply --server-side, or %s\n", c.CRD.Name, len(c.YAML)>>10, fix)
	}
}

// projectCRDDir is where a kubebuilder project keeps its CRDs.
const projectCRDDir = "config/crd"

// ProjectCRDs reads the CRDs a project ships under config/crd (its bases
// and any other YAML there, kustomization files left out), for the kinds
// controller-gen generates none for: a Go package without a +groupName
// marker, or a project whose CRDs are written by hand. The files read are
// named relative to dir. No folder is no CRDs.
func ProjectCRDs(root, dir string) ([]GeneratedCRD, error) {
	return projectCRDs(root, dir, nil)
}

// projectCRDs is ProjectCRDs, and the CRDs of rendered
// (Options.ProjectManifests) after config/'s.
func projectCRDs(root, dir string, rendered map[string][]byte) ([]GeneratedCRD, error) {
	files, err := projectYAML(root, projectCRDDir, dir, true)
	if err != nil {
		return nil, err
	}
	var out []GeneratedCRD
	for _, set := range []map[string][]byte{files, rendered} {
		if err := crdsIn(set, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func crdsIn(files map[string][]byte, out *[]GeneratedCRD) error {
	err := eachObject(files, func(file, kind string, raw []byte) error {
		if kind != "CustomResourceDefinition" {
			return nil
		}
		var c apiextv1.CustomResourceDefinition
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if c.Spec.Group == "" || c.Spec.Names.Kind == "" {
			return fmt.Errorf("%s: CustomResourceDefinition %q names no group or kind", file, c.Name)
		}
		b, err := yaml.Marshal(&c)
		if err != nil {
			return err
		}
		*out = append(*out, GeneratedCRD{File: c.Spec.Group + "_" + c.Spec.Names.Plural + ".yaml", YAML: append([]byte("---\n"), b...), CRD: c, From: file})
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the project's CRDs: %w", err)
	}
	return nil
}

// projectCRDsFor adds to the generated CRDs the project's own (config/crd)
// for each wanted kind controller-gen generated none for, said in a
// warning; a kind with neither is warned of too: its objects cannot be
// created until the project's CRD is applied beside the manifests.
func projectCRDsFor(root, dir string, rendered map[string][]byte, want map[[2]string]bool, generated []GeneratedCRD, warnings io.Writer) ([]GeneratedCRD, error) {
	have := map[[2]string]bool{}
	for _, c := range generated {
		have[[2]string{c.CRD.Spec.Group, c.CRD.Spec.Names.Kind}] = true
	}
	var missing [][2]string
	for k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return generated, nil
	}
	slices.SortFunc(missing, func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
	theirs, err := projectCRDs(root, dir, rendered)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(generated)
	for _, k := range missing {
		i := slices.IndexFunc(theirs, func(c GeneratedCRD) bool { return c.CRD.Spec.Group == k[0] && c.CRD.Spec.Names.Kind == k[1] })
		if i < 0 {
			if warnings != nil {
				fmt.Fprintf(warnings, "warning: %s (%s): controller-gen generated no CRD from its Go package (a +groupName marker on the package, +kubebuilder:object:root on the type?) "+
					"and %s has none (nor --project-manifests): the manifests carry no CRD for it; apply the project's own beside them, or give its rendered chart with --project-manifests\n", k[1], k[0], filepath.Join(relTo(dir, root), projectCRDDir))
			}
			continue
		}
		if warnings != nil {
			fmt.Fprintf(warnings, "warning: %s (%s): controller-gen generated no CRD from its Go package (a +groupName marker on the package?): the project's own %s is used\n",
				k[1], k[0], theirs[i].From)
		}
		out = append(out, theirs[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// projectYAML reads the YAML files of root's folder sub (and its
// subfolders when recursive), kustomize's own files left out, keyed by
// their path relative to dir. No folder is no files.
func projectYAML(root, sub, dir string, recursive bool) (map[string][]byte, error) {
	files := map[string][]byte{}
	top := filepath.Join(root, sub)
	err := filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != top && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if (ext != ".yaml" && ext != ".yml") || strings.HasPrefix(d.Name(), "kustomization") || strings.HasPrefix(d.Name(), "kustomizeconfig") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[relTo(dir, path)] = b
		return nil
	})
	return files, err
}
