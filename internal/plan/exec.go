package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RunOptions says which operator to plan with and how.
type RunOptions struct {
	// Operator is the operator's main package as `go build` takes it
	// (resolved in Dir), or the path of a built binary.
	Operator string
	Dir      string
	// Args are added to the operator's command line.
	Args []string
	// Env is added to the operator's environment (KUBECONFIG is the
	// caller's unless set here).
	Env []string
	// Stderr gets the operator's logs (nil: kept, and the end of them is
	// in the error when it fails).
	Stderr io.Writer
}

// Run builds the operator (unless it is a binary already), runs it with
// OPZERO_PLAN set to req and returns the Report it wrote.
func Run(ctx context.Context, o RunOptions, req Request) (*Report, error) {
	tmp, err := os.MkdirTemp("", "opzero-plan-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin, err := binary(ctx, o, tmp)
	if err != nil {
		return nil, err
	}
	req.Out = filepath.Join(tmp, "plan.json")
	enc, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, o.Args...)
	cmd.Env = append(append(os.Environ(), Env+"="+string(enc)), o.Env...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if o.Stderr != nil {
		cmd.Stderr = io.MultiWriter(&logs, o.Stderr)
	}
	runErr := cmd.Run()
	f, err := os.Open(req.Out)
	if err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("%s exited with %v before writing its plan; its output ends:\n%s", o.Operator, runErr, tail(logs.String()))
		}
		return nil, fmt.Errorf("%s exited without writing its plan: does its main build the operator with operator.New (or classic.NewManager), register it with builder...Complete and call rt.Start? (an opzero older than this CLI has no plan mode)", o.Operator)
	}
	defer f.Close()
	rep, err := Read(f)
	if err != nil {
		return nil, err
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s wrote its plan but then failed (%v):\n%s", o.Operator, runErr, tail(logs.String()))
	}
	return rep, nil
}

// binary is o.Operator when it is an executable file, else the operator
// built from its Go package into dir.
func binary(ctx context.Context, o RunOptions, dir string) (string, error) {
	p := o.Operator
	if !filepath.IsAbs(p) && o.Dir != "" {
		p = filepath.Join(o.Dir, p)
	}
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p, nil
	}
	if o.Operator == "" {
		return "", errors.New("which operator? name the Go package of its main (e.g. ./examples/configwatcher) or a built binary")
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) && (filepath.IsAbs(o.Operator) || strings.HasPrefix(o.Operator, ".")) {
		return "", fmt.Errorf("%s: no such file or folder; name the Go package of the operator's main (e.g. ./examples/configwatcher) or a built binary", o.Operator)
	}
	bin := filepath.Join(dir, "operator")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, o.Operator)
	cmd.Dir = o.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", o.Operator, err, tail(stderr.String()))
	}
	return bin, nil
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
