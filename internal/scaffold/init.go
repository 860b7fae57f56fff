package scaffold

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opzero/opzero/internal/controllergen"
)

// GoVersion is the go directive of generated projects: opzero's own.
const GoVersion = "1.24.0"

// InitOptions configures Init.
type InitOptions struct {
	// Dir is the project folder (created if missing).
	Dir string
	// Domain is the suffix of the API groups (cache -> cache.<domain>).
	Domain string
	// Repo is the Go module path.
	Repo string
	// ProjectName defaults to Dir's base name.
	ProjectName string
	// Owner goes into the copyright line of hack/boilerplate.go.txt.
	Owner string
	// Force allows a folder that is not empty; the files Init writes are
	// overwritten, others are left alone.
	Force bool
	// OpzeroReplace, if set, is a local opzero checkout that go.mod's
	// replace directive points at (opzero is not on a module proxy yet).
	OpzeroReplace string
	// SkipTidy leaves out `go mod tidy` (tests of the files alone).
	SkipTidy bool
	// Out gets progress lines (nil: none).
	Out io.Writer
}

// projectData is what the project templates see.
type projectData struct {
	Domain, Repo, ProjectName, Owner, Year  string
	GoVersion, OpzeroVersion, OpzeroReplace string
	Boilerplate                             string
	// ControllerGen is the controller-tools release of `make generate`:
	// the one `opzero create api` runs, so both write the same code.
	ControllerGen string
}

// Init writes a new project into o.Dir: go.mod, PROJECT, cmd/main.go,
// Makefile, README.md, hack/boilerplate.go.txt, .gitignore, then runs
// `go mod tidy`. Nothing is written if the options are bad or the folder
// is not empty (unless Force).
func Init(ctx context.Context, o InitOptions) error {
	d, err := o.check()
	if err != nil {
		return err
	}
	fs, err := initFiles(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	if err := fs.write(o.Dir); err != nil {
		return err
	}
	logf(o.Out, "wrote %s", strings.Join(fs.paths(), ", "))
	if o.SkipTidy {
		return nil
	}
	logf(o.Out, "go mod tidy")
	return goCmd(ctx, o.Dir, "mod", "tidy")
}

func (o *InitOptions) check() (*projectData, error) {
	if o.Dir == "" {
		o.Dir = "."
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = abs
	if o.ProjectName == "" {
		o.ProjectName = filepath.Base(abs)
	}
	for _, err := range []error{checkDomain(o.Domain), checkRepo(o.Repo), checkProjectName(o.ProjectName), o.checkReplace()} {
		if err != nil {
			return nil, err
		}
	}
	if strings.ContainsAny(o.Owner, "\n*/") {
		return nil, fmt.Errorf("--owner %q: one line without '*' or '/', e.g. --owner \"The Memcached Authors\"", o.Owner)
	}
	if !o.Force {
		if err := emptyDir(abs); err != nil {
			return nil, err
		}
	}
	d := &projectData{
		Domain: o.Domain, Repo: o.Repo, ProjectName: o.ProjectName, Owner: o.Owner,
		Year: strconv.Itoa(time.Now().Year()), GoVersion: GoVersion,
		OpzeroVersion: unpublished, OpzeroReplace: o.OpzeroReplace,
		ControllerGen: controllergen.Version,
	}
	if o.OpzeroReplace == "" {
		d.OpzeroVersion = opzeroVersion()
		if d.OpzeroVersion == "" {
			return nil, fmt.Errorf("go.mod would require %s, which is not published on a module proxy and this opzero was not built from a version of it: "+
				"pass --opzero-replace <folder of an opzero checkout> to write a replace directive", Module)
		}
	}
	return d, nil
}

func (o *InitOptions) checkReplace() error {
	if o.OpzeroReplace == "" {
		return nil
	}
	abs, err := filepath.Abs(o.OpzeroReplace)
	if err != nil {
		return err
	}
	if !isOpzeroModule(abs) {
		return fmt.Errorf("--opzero-replace %s: no go.mod of %s there: give the folder of an opzero checkout", o.OpzeroReplace, Module)
	}
	o.OpzeroReplace = abs
	return nil
}

// emptyDir fails unless dir is missing or holds nothing but .git.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".git" {
			names = append(names, e.Name())
		}
	}
	if len(names) > 0 {
		if len(names) > 5 {
			names = append(names[:5], "...")
		}
		return fmt.Errorf("%s is not empty (%s): opzero init starts a project in an empty folder; "+
			"use another folder, or --force to write the project's files here (overwriting those of the same names)", dir, strings.Join(names, ", "))
	}
	return nil
}

func initFiles(d *projectData) (files, error) {
	fs := files{}
	if err := fs.render("hack/boilerplate.go.txt", "boilerplate.go.txt", d); err != nil {
		return nil, err
	}
	d.Boilerplate = string(fs["hack/boilerplate.go.txt"])
	for _, f := range []struct{ path, tmpl string }{
		{"go.mod", "go.mod"},
		{"cmd/main.go", "main.go"},
		{"Makefile", "Makefile"},
		{"README.md", "README.md"},
		{".gitignore", "gitignore"},
	} {
		if err := fs.render(f.path, f.tmpl, d); err != nil {
			return nil, err
		}
	}
	p := &Project{CliVersion: opzeroVersion(), Domain: d.Domain, Layout: []string{Layout}, ProjectName: d.ProjectName, Repo: d.Repo, Version: "3"}
	b, err := p.marshal()
	if err != nil {
		return nil, err
	}
	fs[ProjectFile] = b
	return fs, nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
