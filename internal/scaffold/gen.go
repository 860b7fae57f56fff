package scaffold

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/opzero/opzero/internal/controllergen"
)

// GenerateDeepCopy writes zz_generated.deepcopy.go into the packages pkgs
// (resolved in dir) that have +kubebuilder:object markers: it runs
// `controller-gen object:headerFile=hack/boilerplate.go.txt`.
func GenerateDeepCopy(dir string, pkgs ...string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	gen := "object:headerFile=" + filepath.Join(abs, "hack", "boilerplate.go.txt")
	if err := controllergen.Run(context.Background(), abs, controllergen.Args(gen, pkgs...)...); err != nil {
		return fmt.Errorf("generating DeepCopy methods in %s: %w", strings.Join(pkgs, ", "), err)
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
