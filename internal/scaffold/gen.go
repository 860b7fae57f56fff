package scaffold

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"
	"sigs.k8s.io/controller-tools/pkg/deepcopy"
	"sigs.k8s.io/controller-tools/pkg/genall"
)

// GenerateDeepCopy writes zz_generated.deepcopy.go into the packages pkgs
// (resolved in dir) that have +kubebuilder:object markers, as
// `controller-gen object:headerFile=hack/boilerplate.go.txt` does.
func GenerateDeepCopy(dir string, pkgs ...string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var gen genall.Generator = &deepcopy.Generator{HeaderFile: filepath.Join(abs, "hack", "boilerplate.go.txt")}
	rt, err := genall.Generators{&gen}.ForRootsWithConfig(&packages.Config{Dir: abs}, pkgs...)
	if err != nil {
		return fmt.Errorf("loading %s for the DeepCopy generation: %w", strings.Join(pkgs, ", "), err)
	}
	var msgs []string
	for _, p := range rt.Roots {
		for _, e := range p.Errors {
			if e.Kind != packages.TypeError { // the methods being generated are missing
				msgs = append(msgs, e.Error())
			}
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("loading %s: %s", strings.Join(pkgs, ", "), strings.Join(msgs, "; "))
	}
	rt.OutputRules = genall.OutputRules{Default: genall.OutputArtifacts{}}
	var errs bytes.Buffer
	rt.ErrorWriter = &errs
	if rt.Run() {
		return fmt.Errorf("generating DeepCopy methods in %s: %s", strings.Join(pkgs, ", "), strings.TrimSpace(errs.String()))
	}
	return nil
}

func goCmd(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, bytes.TrimSpace(out))
	}
	return nil
}
