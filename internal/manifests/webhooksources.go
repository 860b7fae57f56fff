package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/opzero/opzero/internal/description"
)

// Where a project declares its webhooks, so that an error can name the
// file to fix: the +kubebuilder:webhook markers and the calls that
// register webhooks, in the Go files of the packages its main builds from.

// WebhookSources are the webhook declarations found in a module's Go files.
type WebhookSources struct {
	// MarkerPaths maps a marker's path= to its file; MarkerNames its name=.
	MarkerPaths, MarkerNames map[string]string
	// Registering are the files that register webhooks
	// (ctrl.NewWebhookManagedBy, GetWebhookServer().Register), sorted.
	Registering []string
	// RBACMarked are the packages with a +kubebuilder:rbac marker (read in
	// the same pass: the markers of the generated ClusterRole).
	RBACMarked []string
	// Attached maps a marker's path= to its file:line when the marker is
	// in the doc comment of a declaration (no blank line between them):
	// controller-gen reads +kubebuilder:webhook markers only from comments
	// that stand alone, so it ignores that one.
	Attached map[string]string
}

var (
	markerArg = regexp.MustCompile(`[,:](path|name)=([^,\s]+)`)
	registers = regexp.MustCompile(`NewWebhookManagedBy\(|GetWebhookServer\(\)\.Register\(`)
)

// modulePackage is a package of the operator's module that its main
// builds from.
type modulePackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Module     *struct{ Path string }
}

// modulePackageList lists the packages of module mod that main package pkg
// builds from (itself included).
func modulePackageList(ctx context.Context, dir, pkg, mod string) ([]modulePackage, error) {
	out, err := goCmd(ctx, dir, "list", "-deps", "-json=ImportPath,Dir,GoFiles,Module", pkg)
	if err != nil {
		return nil, fmt.Errorf("listing the packages of %s: %w", pkg, err)
	}
	var pkgs []modulePackage
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var p modulePackage
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("listing the packages of %s: %w", pkg, err)
		}
		if p.Module != nil && p.Module.Path == mod {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// scanWebhookSources reads the packages' Go files for webhook markers and
// registrations, and which hold +kubebuilder:rbac markers; file names are
// relative to dir.
func scanWebhookSources(dir string, pkgs []modulePackage) (WebhookSources, error) {
	ws := WebhookSources{MarkerPaths: map[string]string{}, MarkerNames: map[string]string{}, Attached: map[string]string{}}
	for _, p := range pkgs {
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			b, err := os.ReadFile(path)
			if err != nil {
				return ws, err
			}
			rel := relTo(dir, path)
			lines := strings.Split(string(b), "\n")
			for n, line := range lines {
				if rbacMarker.MatchString(line) && !slices.Contains(ws.RBACMarked, p.ImportPath) {
					ws.RBACMarked = append(ws.RBACMarked, p.ImportPath)
				}
				if i := strings.Index(line, "+kubebuilder:webhook:"); i >= 0 && strings.HasPrefix(strings.TrimSpace(line), "//") {
					for _, m := range markerArg.FindAllStringSubmatch(line[i:], -1) {
						if m[1] == "path" {
							ws.MarkerPaths[m[2]] = rel
							if docOfDeclaration(lines[n+1:]) {
								ws.Attached[m[2]] = fmt.Sprintf("%s:%d", rel, n+1)
							}
						} else {
							ws.MarkerNames[m[2]] = rel
						}
					}
				}
				if registers.MatchString(line) && !slices.Contains(ws.Registering, rel) {
					ws.Registering = append(ws.Registering, rel)
				}
			}
		}
	}
	sort.Strings(ws.Registering)
	return ws, nil
}

// docOfDeclaration reports whether the comment a marker line ends in
// (rest: the lines after it) runs into a declaration with no blank line:
// it is then that declaration's doc comment.
func docOfDeclaration(rest []string) bool {
	for _, l := range rest {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "//") {
			continue
		}
		for _, kw := range []string{"type ", "func ", "var ", "const ", "type(", "var(", "const("} {
			if strings.HasPrefix(t, kw) {
				return true
			}
		}
		return false
	}
	return false
}

func relTo(dir, path string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		if r, err := filepath.Rel(abs, path); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
	}
	return path
}

// markerFile is " (in <file>)" for the marker named name, or "".
func (g *gen) markerFile(name string) string {
	if f := g.in.WebhookSources.MarkerNames[name]; f != "" {
		return " (in " + f + ")"
	}
	return ""
}

// registeringFiles names the files that register webhooks, for an error.
func (g *gen) registeringFiles() string {
	if r := g.in.WebhookSources.Registering; len(r) > 0 {
		return " (registered in " + strings.Join(r, ", ") + ")"
	}
	return ""
}

// errMarkersNotRegistered: markers declare webhooks, and the binary
// registered none when it described itself.
func errMarkersNotRegistered(importPath string, ws WebhookSources) error {
	var decl []string
	for p, f := range ws.MarkerPaths {
		decl = append(decl, f+": path="+p)
	}
	sort.Strings(decl)
	return fmt.Errorf("%s: +kubebuilder:webhook markers declare webhooks (%s), but the binary registered none on its webhook server when it described itself, "+
		"so their paths cannot be served: register them before mgr.Start (ctrl.NewWebhookManagedBy(mgr).For(...)...Complete(), as kubebuilder's main does unless ENABLE_WEBHOOKS=false), "+
		"or remove the markers; nothing written", importPath, strings.Join(decl, "; "))
}

// checkVersions refuses a CRD with several versions whose schemas differ
// when the binary converts none of its versions: with conversion strategy
// None the API server would serve an object written in one version as
// another with that version's fields missing. The error names each
// version's Go file.
func checkVersions(ctx context.Context, dir string, crds []GeneratedCRD, kinds []description.ConversionKind, converted []description.ConversionKind) error {
	for _, c := range crds {
		g, k := c.CRD.Spec.Group, c.CRD.Spec.Names.Kind
		vs := c.CRD.Spec.Versions
		if len(vs) < 2 || slices.ContainsFunc(converted, func(ck description.ConversionKind) bool { return ck.Group == g && ck.Kind == k }) {
			continue
		}
		var first []byte
		same := true
		for i, v := range vs {
			b, _ := json.Marshal(v.Schema)
			if i == 0 {
				first = b
			} else if !bytes.Equal(first, b) {
				same = false
			}
		}
		if same {
			continue // None converts identical schemas soundly
		}
		var where []string
		for _, ck := range kinds {
			if ck.Group != g || ck.Kind != k {
				continue
			}
			for _, v := range ck.Versions {
				where = append(where, v.Version+" in "+typeFile(ctx, dir, v.GoPackage, k))
			}
		}
		return fmt.Errorf("CRD %s has versions whose schemas differ (%s) and the binary converts none of them: with conversion strategy None the API server would serve an object written in one version as another with that version's fields unset. "+
			"Make one version the Hub and the others Convertible and register the conversion webhook (ctrl.NewWebhookManagedBy(mgr).For(&%s{}).Complete()), or drop the old version from the scheme; nothing written",
			c.CRD.Name, strings.Join(where, ", "), k)
	}
	return nil
}

// typeFile is the file of package pkg that declares type kind (relative to
// dir), else the package.
func typeFile(ctx context.Context, dir, pkg, kind string) string {
	out, err := goCmd(ctx, dir, "list", "-f", "{{.Dir}}", pkg)
	if err != nil {
		return pkg
	}
	pd := strings.TrimSpace(out)
	files, _ := filepath.Glob(filepath.Join(pd, "*.go"))
	decl := regexp.MustCompile(`(?m)^\s*(type\s+)?` + regexp.QuoteMeta(kind) + `\s+struct\s*\{`)
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && decl.Match(b) {
			return relTo(dir, f)
		}
	}
	return pkg
}
