package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/image"
	"github.com/opzero/opzero/internal/kustomize"
)

// koImage matches an image given as a Go import path, as ko resolves it
// (the references `opzero manifests` writes).
var koImage = regexp.MustCompile(`ko://[A-Za-z0-9_.~/-]+`)

// KoPackages returns the import paths of the ko:// images manifest names,
// sorted, each once.
func KoPackages(manifest string) []string {
	var pkgs []string
	for _, m := range koImage.FindAllString(manifest, -1) {
		pkgs = append(pkgs, strings.TrimPrefix(m, "ko://"))
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}

// KoImageName is the repository of a package's image under
// image.Registry: the import path, lower-cased.
func KoImageName(pkg string) string { return strings.ToLower(pkg) }

// ResolveKo does what `ko resolve` does, without a registry: it builds
// every ko:// image manifest names (a static linux binary, `go build` run
// in buildDir, the module that resolves the import paths), imports the
// images into the node (Import) and returns manifest with each ko://
// reference replaced by its image's tag, which is the binary's digest, so
// a changed binary is a new reference and Knative makes a new revision.
// Nothing else in manifest changes.
func (c *Cluster) ResolveKo(ctx context.Context, buildDir, manifest string) (string, map[string]string, error) {
	pkgs := KoPackages(manifest)
	if len(pkgs) == 0 {
		return manifest, nil, nil
	}
	out := filepath.Join(c.Dir, "ko")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", nil, err
	}
	specs := make([]image.Spec, len(pkgs))
	for i, pkg := range pkgs {
		bin := filepath.Join(out, path.Base(pkg))
		if err := goBuild(ctx, buildDir, pkg, bin); err != nil {
			return "", nil, err
		}
		specs[i] = image.Spec{Name: KoImageName(pkg), Binary: bin}
	}
	built, err := c.Import(ctx, specs...)
	if err != nil {
		return "", nil, err
	}
	refs := make(map[string]string, len(pkgs))
	for i, pkg := range pkgs {
		refs[pkg] = built[i].Ref
	}
	// Replace whole references only: ko://a must not rewrite ko://a/b.
	resolved := koImage.ReplaceAllStringFunc(manifest, func(m string) string {
		return refs[strings.TrimPrefix(m, "ko://")]
	})
	return resolved, refs, nil
}

// goBuild builds pkg as a static linux binary at bin.
func goBuild(ctx context.Context, dir, pkg, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building ko://%s in %s: %w\n%s", pkg, dir, err, out)
	}
	return nil
}

// ReadManifests reads a YAML file, or a folder's *.yaml and *.yml files
// in name order, as one multi-document manifest; a folder with a
// kustomization.yaml is rendered as with -k (ReadKustomization).
func ReadManifests(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() && kustomize.Has(p) {
		return ReadKustomization(p)
	}
	files := []string{p}
	if st.IsDir() {
		files = nil
		entries, err := os.ReadDir(p)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	var b strings.Builder
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "---\n%s\n", raw)
	}
	return b.String(), nil
}

// ReadKustomization renders the kustomization in dir with kustomize's
// library, as kubectl apply -k does (opzero cluster apply -k).
func ReadKustomization(dir string) (string, error) {
	b, err := kustomize.Render(dir)
	return string(b), err
}

// Apply applies manifest server-side with the pinned kubectl as the
// cluster's admin and returns kubectl's output. The CustomResourceDefinitions
// and Namespaces go first, and the rest once those CRDs are Established:
// kubectl maps every object's kind before it applies any, so a CRD and an
// object of its kind in one apply fail ("no matches for kind"), as
// `opzero manifests --source=hub` writes them (crds.yaml, sources.yaml).
//
// Every apply here is made as ApplyFieldManager, taking over the fields
// another manager applied (--force-conflicts): what one apply wrote (the
// hub's Deployment, say) another may write again without a conflict.
func (c *Cluster) Apply(ctx context.Context, manifest string) (string, error) {
	flags := []string{"--field-manager=" + ApplyFieldManager, "--force-conflicts"}
	first, crds, rest := splitCRDs(manifest)
	var out strings.Builder
	if first != "" && rest != "" {
		o, err := c.kubectl(ctx, first, append([]string{"apply", "--server-side", "-f", "-"}, flags...)...)
		out.WriteString(o)
		if err != nil {
			return out.String(), err
		}
		if len(crds) > 0 {
			o, err := c.kubectl(ctx, "", append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, crds...)...)
			if err != nil {
				return out.String() + o, err
			}
		}
		manifest = rest
	}
	o, err := c.kubectl(ctx, manifest, append([]string{"apply", "--server-side", "-f", "-"}, flags...)...)
	out.WriteString(o)
	return out.String(), err
}

func (c *Cluster) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", args[0], err, out)
	}
	return string(out), nil
}

// splitCRDs splits a multi-document manifest into its
// CustomResourceDefinitions and Namespaces (first, with the CRDs as
// crd/<name>) and everything else (rest).
func splitCRDs(manifest string) (first string, crds []string, rest string) {
	var a, b strings.Builder
	for _, doc := range strings.Split(manifest, "\n---") {
		var meta struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue
		}
		out := &b
		switch meta.Kind {
		case "CustomResourceDefinition":
			crds = append(crds, "crd/"+meta.Metadata.Name)
			out = &a
		case "Namespace":
			out = &a
		}
		fmt.Fprintf(out, "---\n%s\n", strings.TrimPrefix(strings.TrimPrefix(doc, "---"), "\n"))
	}
	return a.String(), crds, b.String()
}
