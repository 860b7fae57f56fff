package scaffold

import (
	"bytes"
	"embed"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").ParseFS(templateFS, "templates/*.tmpl"))

// files maps a path relative to the project to its content.
type files map[string][]byte

// render executes the template name with data into path; Go files are
// gofmt-formatted (a template that does not format is a bug of opzero's).
func (f files) render(path, name string, data any) error {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name+".tmpl", data); err != nil {
		return fmt.Errorf("rendering %s: %w", path, err)
	}
	out := b.Bytes()
	if strings.HasSuffix(path, ".go") {
		var err error
		if out, err = format.Source(out); err != nil {
			return fmt.Errorf("formatting %s (a bug in opzero's templates): %w\n%s", path, err, b.Bytes())
		}
	}
	f[path] = out
	return nil
}

// write writes every file under dir, creating folders.
func (f files) write(dir string) error {
	for _, p := range f.paths() {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f[p], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (f files) paths() []string {
	out := make([]string, 0, len(f))
	for p := range f {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
