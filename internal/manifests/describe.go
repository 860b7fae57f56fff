package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/ownsource"
)

// describeTimeout bounds the run of an operator binary that describes itself.
var describeTimeout = 30 * time.Second

// Target is the operator a description was read from.
type Target struct {
	// Dir is where its package was resolved (the go command's working dir).
	Dir string
	// ImportPath is the Go import path of its main package.
	ImportPath string
	Desc       description.Description
	// WebhooksDespiteEnv, if set, are the webhooks the binary registers
	// even with ENABLE_WEBHOOKS=false (fine classic; serverless, refused).
	WebhooksDespiteEnv string
}

// Describe builds the operator's main package pkg (a go package path as
// `go build` takes it, resolved in dir) and runs it with OPZERO_DESCRIBE, so
// that it prints its own description instead of serving.
func Describe(ctx context.Context, dir, pkg string) (*Target, error) {
	if pkg == "" {
		return nil, errors.New("no operator package: pass --operator with the Go package of the operator's main, e.g. ./examples/configwatcher")
	}
	dir, err := resolvingDir(ctx, dir, pkg)
	if err != nil {
		return nil, err
	}
	ip, err := goCmd(ctx, dir, "list", "-f", "{{.Name}} {{.ImportPath}}", pkg)
	if err != nil {
		return nil, fmt.Errorf("operator package %q: %w (pass the Go package path of the operator's main, e.g. ./examples/configwatcher)", pkg, err)
	}
	name, importPath, _ := strings.Cut(strings.TrimSpace(ip), " ")
	if name != "main" {
		return nil, fmt.Errorf("operator package %q is package %s, not a command: pass the package with the operator's func main", pkg, name)
	}
	tmp, err := os.MkdirTemp("", "opzero-describe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "operator")
	if _, err := goCmd(ctx, dir, "build", "-o", bin, pkg); err != nil {
		return nil, fmt.Errorf("building %s: %w", importPath, err)
	}
	out := filepath.Join(tmp, "description.json")
	d, err := runDescribe(ctx, bin, out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", importPath, err)
	}
	t := &Target{Dir: dir, ImportPath: importPath, Desc: d}
	if d.Webhooks != nil {
		if err := t.describeServerless(ctx, bin, out); err != nil {
			return nil, fmt.Errorf("%s: %w", importPath, err)
		}
	}
	return t, nil
}

// describeServerless describes a binary that registers webhooks once more
// as its serverless Service runs it, with ENABLE_WEBHOOKS=false: it must
// register none then, or the Service would refuse them at start
// (WebhooksDespiteEnv, refused by Prepare for serverless manifests). Its
// controllers and flags are that run's, its webhooks the first run's.
func (t *Target) describeServerless(ctx context.Context, bin, out string) error {
	sd, err := runDescribe(ctx, bin, out, enableWebhooksEnv+"=false")
	if err != nil {
		return fmt.Errorf("with %s=false: %w", enableWebhooksEnv, err)
	}
	if w := sd.Webhooks; w != nil {
		t.WebhooksDespiteEnv = strings.Join(w.Paths, ", ")
		if len(w.Conversion) > 0 {
			t.WebhooksDespiteEnv = strings.TrimPrefix(t.WebhooksDespiteEnv+", "+convertPath, ", ")
		}
		return nil
	}
	sd.Webhooks = t.Desc.Webhooks
	t.Desc = sd
	return nil
}

// errWebhooksDespiteEnv is Prepare's error for serverless manifests of a
// binary that registers webhooks even with ENABLE_WEBHOOKS=false.
func (t *Target) errWebhooksDespiteEnv() error {
	return fmt.Errorf("%s registers its webhooks (%s) even with %s=false, so its serverless Service would refuse to start: "+
		"register them only when %s is not false, as kubebuilder's main does (if os.Getenv(%q) != \"false\" { ...SetupWebhookWithManager(mgr) }), or generate --mode=classic",
		t.ImportPath, t.WebhooksDespiteEnv, enableWebhooksEnv, enableWebhooksEnv, enableWebhooksEnv)
}

// convertPath is where controller-runtime serves conversion.
const convertPath = "/convert"

// noServerKubeconfig names an API server that cannot exist (.invalid).
const noServerKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://opzero-describe.invalid:6443"}}]
users: [{name: none, user: {}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`

// runDescribe runs bin with OPZERO_DESCRIBE=out (and env) and reads what
// it wrote.
func runDescribe(ctx context.Context, bin, out string, env ...string) (description.Description, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	_ = os.Remove(out) // a run that fails does not leave the last run's
	cmd := exec.CommandContext(ctx, bin)
	// No API server is needed; a KUBECONFIG whose server does not exist
	// proves it. It loads, so that a main that calls ctrl.GetConfigOrDie()
	// before opzero (an adopted controller-runtime project) gets that far.
	kc := filepath.Join(filepath.Dir(out), "kubeconfig")
	if err := os.WriteFile(kc, []byte(noServerKubeconfig), 0o600); err != nil {
		return description.Description{}, err
	}
	cmd.Env = append(append(os.Environ(), description.Env+"="+out, "KUBECONFIG="+kc), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	hint := "does its main build the operator with operator.New (or classic.NewManager in an adopted project), register it with builder...Complete and call rt.Start? " +
		"(a binary describes itself when " + description.Env + " is set; an opzero older than the CLI does not)"
	if ctx.Err() != nil {
		return description.Description{}, fmt.Errorf("did not describe itself within %s: it kept running (serving?); %s", describeTimeout, hint)
	}
	f, err := os.Open(out)
	if err != nil {
		if runErr != nil && strings.TrimSpace(stderr.String()) != "" {
			// Its own error first: an adopted manager refuses at Start what
			// cannot run serverless, and says what to do.
			return description.Description{}, fmt.Errorf("exited with %v before describing itself; its output ends:\n%s\n(if its main does not start an opzero operator: %s)",
				runErr, tail(stderr.String()), hint)
		}
		if runErr != nil {
			return description.Description{}, fmt.Errorf("exited with %v before describing itself, with no output: %s", runErr, hint)
		}
		return description.Description{}, fmt.Errorf("exited without describing itself: %s", hint)
	}
	defer f.Close()
	d, err := description.Read(f)
	if err != nil {
		return description.Description{}, err
	}
	if runErr != nil {
		return description.Description{}, fmt.Errorf("described itself but then failed (%v):\n%s", runErr, tail(stderr.String()))
	}
	if len(d.Operators) == 0 {
		return description.Description{}, errors.New("registered no operator: call builder.ControllerManagedBy(rt)...Complete(reconciler) before rt.Start")
	}
	return d, nil
}

func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.String()))
	}
	return stdout.String(), nil
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// resolvingDir is where pkg is resolved: dir, or, for one of opzero's own
// commands (github.com/opzero/opzero/cmd/opzero-metacontroller) that dir's
// module does not resolve (a folder of YAML, no go.mod), the opzero source
// this CLI was built from (package ownsource): an installed CLI serves
// Metacontroller's hooks from the user's own folder.
func resolvingDir(ctx context.Context, dir, pkg string) (string, error) {
	if !ownsource.Own(pkg) {
		return dir, nil
	}
	if _, err := goCmd(ctx, dir, "list", "-f", "{{.ImportPath}}", pkg); err == nil {
		return dir, nil
	}
	root, err := ownsource.Root()
	if err != nil {
		return "", fmt.Errorf("operator package %q is opzero's own, and %s is no Go module that has it: %w", pkg, dir, err)
	}
	return root, nil
}

// OwnOutsideModule reports whether pkg is one of opzero's own commands
// that dir's Go module does not resolve: it is built from opzero's source
// (resolvingDir), and dir is the project as far as config/ and the
// output's kustomization go.
func OwnOutsideModule(ctx context.Context, dir, pkg string) bool {
	if !ownsource.Own(pkg) {
		return false
	}
	_, err := goCmd(ctx, dir, "list", "-f", "{{.ImportPath}}", pkg)
	return err != nil
}
