package scaffold

import (
	"context"
	"errors"
	"fmt"
	"go/format"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// APIOptions configures CreateAPI.
type APIOptions struct {
	// Dir is the project folder (the one with PROJECT).
	Dir string
	// Group (without the domain), Version and Kind of the new kind.
	Group, Version, Kind string
	// Resource writes the Go type (api/<version>/<kind>_types.go) and a
	// sample; Controller writes the reconciler, its test, and registers it
	// in cmd/main.go. Both are what `create api` does by default.
	Resource, Controller bool
	// SkipGenerate leaves out `go mod tidy` and the DeepCopy generation
	// (tests of the files alone).
	SkipGenerate bool
	// Out gets progress lines (nil: none).
	Out io.Writer
}

// resourceData is what the resource templates see.
type resourceData struct {
	Boilerplate                                   string
	Repo, Group, Version, Kind, Lower, Plural     string
	QualifiedGroup, ImportAlias, APIPath, Project string
}

// The markers of cmd/main.go where CreateAPI inserts code, as kubebuilder's.
const (
	importsMarker = "// +kubebuilder:scaffold:imports"
	schemeMarker  = "// +kubebuilder:scaffold:scheme"
	builderMarker = "// +kubebuilder:scaffold:builder"
)

// CreateAPI adds a kind to the project in o.Dir: its Go type, a sample, a
// reconciler with a test, the reconciler's registration in cmd/main.go and
// the kind in PROJECT; then `go mod tidy` and the DeepCopy methods, so the
// project builds. Nothing is written if the project, the names or the kind
// are not right.
func CreateAPI(ctx context.Context, o APIOptions) error {
	if o.Dir == "" {
		o.Dir = "."
	}
	p, err := LoadProject(o.Dir)
	if err != nil {
		return err
	}
	d, err := o.check(p)
	if err != nil {
		return err
	}
	fs, err := o.files(p, d)
	if err != nil {
		return err
	}
	if err := fs.write(o.Dir); err != nil {
		return err
	}
	logf(o.Out, "wrote %s", strings.Join(fs.paths(), ", "))
	if o.SkipGenerate {
		return nil
	}
	logf(o.Out, "go mod tidy")
	if err := goCmd(ctx, o.Dir, "mod", "tidy"); err != nil {
		return err
	}
	logf(o.Out, "generating DeepCopy methods (controller-gen object) in ./api/...")
	return GenerateDeepCopy(o.Dir, "./api/...")
}

func (o *APIOptions) check(p *Project) (*resourceData, error) {
	if !o.Resource && !o.Controller {
		return nil, errors.New("--resource=false and --controller=false: nothing to create; leave one of them on")
	}
	if err := checkGVK(o.Group, o.Version, o.Kind, p.Domain); err != nil {
		return nil, err
	}
	for _, r := range p.Resources {
		if r.Group != o.Group {
			return nil, fmt.Errorf("--group %s: this project's group is %s (PROJECT): a project has one API group; use --group %s, or another project for another group", o.Group, r.Group, r.Group)
		}
	}
	existing := p.find(o.Group, o.Version, o.Kind)
	switch {
	case o.Resource && existing != nil:
		return nil, fmt.Errorf("kind %s of %s.%s/%s exists already (PROJECT); choose another --kind or --version, or --resource=false to add only a controller for it", o.Kind, o.Group, p.Domain, o.Version)
	case !o.Resource && (existing == nil || existing.API == nil):
		return nil, fmt.Errorf("--resource=false: the project has no kind %s in %s/%s (PROJECT) to write a controller for; create it with --resource", o.Kind, o.Group, o.Version)
	case existing != nil && existing.Controller && o.Controller:
		return nil, fmt.Errorf("kind %s has a controller already (PROJECT)", o.Kind)
	}
	if o.Controller {
		for _, r := range p.Resources {
			if r.Controller {
				return nil, fmt.Errorf("the project has a controller already (for %s): one opzero operator runs one controller in serverless mode (one Knative Service); "+
					"add this kind with --controller=false (e.g. a kind the %s controller owns), or make another project for another operator", r.Kind, r.Kind)
			}
		}
	}
	lower := strings.ToLower(o.Kind)
	d := &resourceData{
		Repo: p.Repo, Group: o.Group, Version: o.Version, Kind: o.Kind, Lower: lower, Plural: plural(o.Kind),
		QualifiedGroup: o.Group + "." + p.Domain, ImportAlias: o.Group + o.Version,
		APIPath: p.Repo + "/api/" + o.Version, Project: p.ProjectName,
	}
	b, err := os.ReadFile(filepath.Join(o.Dir, "hack", "boilerplate.go.txt"))
	if err != nil {
		return nil, fmt.Errorf("reading the header of generated files: %w (opzero init writes hack/boilerplate.go.txt; restore it)", err)
	}
	d.Boilerplate = string(b)
	return d, nil
}

// files renders the new files and the edited cmd/main.go and PROJECT.
func (o *APIOptions) files(p *Project, d *resourceData) (files, error) {
	fs := files{}
	type file struct{ path, tmpl string }
	var todo []file
	if o.Resource {
		todo = append(todo,
			file{"api/" + d.Version + "/" + d.Lower + "_types.go", "types.go"},
			file{"config/samples/" + d.Group + "_" + d.Version + "_" + d.Lower + ".yaml", "sample.yaml"})
		if !exists(filepath.Join(o.Dir, "api", d.Version, "groupversion_info.go")) {
			todo = append(todo, file{"api/" + d.Version + "/groupversion_info.go", "groupversion_info.go"})
		}
	}
	if o.Controller {
		todo = append(todo,
			file{"internal/controller/" + d.Lower + "_controller.go", "controller.go"},
			file{"internal/controller/" + d.Lower + "_controller_test.go", "controller_test.go"},
			file{"internal/controller/suite_test.go", "suite_test.go"})
	}
	for _, f := range todo {
		if exists(filepath.Join(o.Dir, f.path)) {
			return nil, fmt.Errorf("%s exists already and PROJECT does not know it: move it away, or pick another --kind", f.path)
		}
		if err := fs.render(f.path, f.tmpl, d); err != nil {
			return nil, err
		}
	}
	main, err := o.editMain(p, d)
	if err != nil {
		return nil, err
	}
	fs["cmd/main.go"] = main
	if existing := p.find(o.Group, o.Version, o.Kind); existing != nil {
		existing.Controller = true
	} else {
		p.Resources = append(p.Resources, Resource{
			API: &ResourceAPI{CRDVersion: "v1", Namespaced: true}, Controller: o.Controller,
			Domain: p.Domain, Group: o.Group, Kind: o.Kind, Path: d.APIPath, Version: o.Version,
		})
	}
	if fs[ProjectFile], err = p.marshal(); err != nil {
		return nil, err
	}
	return fs, nil
}

// editMain inserts the API version's scheme registration and the
// controller's setup at kubebuilder's markers of cmd/main.go.
func (o *APIOptions) editMain(p *Project, d *resourceData) ([]byte, error) {
	path := filepath.Join(o.Dir, "cmd", "main.go")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing: opzero create api registers the kind and its controller there", path)
	}
	if err != nil {
		return nil, err
	}
	src := string(b)
	newVersion := true
	for _, r := range p.Resources {
		newVersion = newVersion && !(r.Group == d.Group && r.Version == d.Version)
	}
	if newVersion {
		if src, err = insert(src, path, importsMarker, fmt.Sprintf("%s %q\n", d.ImportAlias, d.APIPath)); err != nil {
			return nil, err
		}
		if src, err = insert(src, path, schemeMarker, fmt.Sprintf("utilruntime.Must(%s.AddToScheme(scheme))\n", d.ImportAlias)); err != nil {
			return nil, err
		}
	}
	if o.Controller {
		if src, err = insert(src, path, importsMarker, fmt.Sprintf("%q\n", d.Repo+"/internal/controller")); err != nil {
			return nil, err
		}
		setup := fmt.Sprintf(`if err := (&controller.%[1]sReconciler{
	Client:   rt.GetClient(),
	Recorder: rt.GetEventRecorder(%[2]q),
}).SetupWithRuntime(rt); err != nil {
	return fmt.Errorf("setting up the %[1]s controller: %%w", err)
}
`, d.Kind, d.Lower)
		if src, err = insert(src, path, builderMarker, setup); err != nil {
			return nil, err
		}
	}
	out, err := format.Source([]byte(src))
	if err != nil {
		return nil, fmt.Errorf("%s does not parse after adding %s (%v): fix it, then run opzero create api again", path, d.Kind, err)
	}
	return out, nil
}

// insert puts text (lines) before the line holding marker, indented as it.
func insert(src, path, marker, text string) (string, error) {
	i := strings.Index(src, marker)
	if i < 0 {
		return "", fmt.Errorf("%s has no %q line: opzero create api inserts code there; put the marker back where kubebuilder has it", path, marker)
	}
	lineStart := strings.LastIndexByte(src[:i], '\n') + 1
	indent := src[lineStart:i]
	var b strings.Builder
	for _, l := range strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n") {
		b.WriteString(indent + l)
	}
	b.WriteString("\n")
	return src[:lineStart] + b.String() + src[lineStart:], nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
