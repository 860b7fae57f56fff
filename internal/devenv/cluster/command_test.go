package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/devenv/image"
	"github.com/opzero/opzero/internal/testkit"
)

// TestCommandImageRunsTheHook: the image CommandImage makes of the
// HelloWorld hook's dev.opzero.dev/command (python3, Debian's) holds what
// it needs and nothing of the host: extracted into an empty folder and run
// there (chroot, as user 65532, in its working folder, as kubelet runs the
// image), it answers a sync. The chroot part needs root.
func TestCommandImageRunsTheHook(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 (Debian's python3)")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec, err := CommandImage(ctx, root, "hello-hook", []string{"python3", "examples/metacontroller/helloworld/hook.py"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(spec.Path, "/usr/bin/python3") || spec.WorkDir != AppDir {
		t.Errorf("program %s, working folder %s", spec.Path, spec.WorkDir)
	}
	has := map[string]bool{}
	for _, f := range spec.Files {
		has[f.Path] = true
	}
	for _, want := range []string{AppDir + "/examples/metacontroller/helloworld/hook.py", "/usr/lib/python3.11/http/server.py", "/lib64/ld-linux-x86-64.so.2"} {
		if !has[want] && strings.Contains(spec.Path, "3.11") {
			t.Errorf("the image lacks %s", want)
		}
	}
	for p := range has {
		if strings.Contains(p, "/test/") || strings.Contains(p, "/config-3") {
			t.Errorf("the image holds %s", p)
		}
	}
	tar := filepath.Join(t.TempDir(), "hook.tar")
	t0 := time.Now()
	built, err := image.Write(tar, spec)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(tar)
	t.Logf("%s: %d files, %.1f MiB, written in %s", built[0].Ref, len(spec.Files)+1, float64(st.Size())/(1<<20), time.Since(t0).Round(time.Millisecond))
	again, err := CommandImage(ctx, root, "hello-hook", []string{"python3", "examples/metacontroller/helloworld/hook.py"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := image.Write(filepath.Join(t.TempDir(), "again.tar"), again); err != nil || b[0].Ref != built[0].Ref {
		t.Errorf("again: %v %v, want %s", b, err, built[0].Ref)
	}

	if os.Geteuid() != 0 {
		t.Skip("running the image's files in a chroot needs root")
	}
	img, err := image.Read(tar, built[0].Ref)
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	if err := untar(io.NopCloser(bytes.NewReader(img.Layer)), rootfs); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logFile := filepath.Join(t.TempDir(), "hook.log")
	logOut, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer logOut.Close()
	cmd := exec.Command(img.Entrypoint[0], img.Entrypoint[1:]...)
	cmd.Dir = img.WorkDir
	cmd.Env = []string{fmt.Sprintf("PORT=%d", port), "HOOK_TOKEN=t"}
	cmd.Stdout, cmd.Stderr = logOut, logOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	if img.User != image.NonRoot {
		t.Errorf("user %s", img.User)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	body := `{"controller":{},"parent":{"metadata":{"name":"n"},"spec":{"who":"chroot"}},"children":{},"related":{}}`
	testkit.Eventually(t, 30*time.Second, "the hook in its image answers a sync", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://127.0.0.1:%d/sync", port), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out, _ := os.ReadFile(logFile)
			return false, fmt.Errorf("%w; output: %s", err, out)
		}
		defer resp.Body.Close()
		var answer struct{ Status map[string]any }
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			return false, err
		}
		return answer.Status["greeting"] == "Hello, chroot!", fmt.Errorf("answer %v", answer)
	})
}

// untar writes a tar stream's folders and regular files under dir.
func untar(r io.ReadCloser, dir string) error {
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode).Perm()|0o111); err != nil {
				return err
			}
			_ = os.Chmod(p, os.FileMode(h.Mode))
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}

// TestResolveCommands: a Knative Service and a Deployment annotated
// dev.opzero.dev/command get their command's image in their first
// container (the rest of the object kept); a Deployment without the
// annotation, and a ConfigMap that only mentions it, stay as written,
// byte for byte.
func TestResolveCommands(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 (Debian's python3)")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"hooks/sync.py", "hooks/helper.py"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("print('hi')\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	untouched := []string{`
apiVersion: apps/v1
kind: Deployment
metadata: {name: plain}
spec:
  template:
    spec:
      containers: [{name: c, image: example.com/plain:v1}]
`, `
apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
data: {note: "dev.opzero.dev/command runs a hook locally"}
`}
	manifest := `---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: Hook
  namespace: ns
  annotations:
    dev.opzero.dev/command: '["python3", "hooks/sync.py", "--flag"]'
spec:
  template:
    spec:
      containers:
      - image: ghcr.io/example/hook:latest
        env: [{name: A, value: b}]
---` + untouched[0] + `---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: deployed-hook
  annotations:
    dev.opzero.dev/command: '["python3", "hooks/sync.py"]'
spec:
  template:
    spec:
      containers:
      - {name: hook, image: example.com/hook:v1, ports: [{containerPort: 80}]}
      - {name: sidecar, image: example.com/sidecar:v1}
---` + untouched[1]
	var got []image.Spec
	load := func(_ context.Context, specs ...image.Spec) ([]image.Built, error) {
		got = specs
		out := make([]image.Built, len(specs))
		for i, s := range specs {
			out[i].Ref = image.Registry + "/" + s.Name + ":test"
		}
		return out, nil
	}
	resolved, refs, err := resolveCommands(context.Background(), dir, manifest, load)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "command/hook" || got[1].Name != "command/deployed-hook" {
		t.Fatalf("images %+v", got)
	}
	if want := []string{"hooks/sync.py", "--flag"}; strings.Join(got[0].Args, " ") != strings.Join(want, " ") {
		t.Errorf("args %q, want %q", got[0].Args, want)
	}
	var app []string
	for _, f := range got[0].Files {
		if strings.HasPrefix(f.Path, AppDir+"/") {
			app = append(app, f.Path)
		}
	}
	if strings.Join(app, " ") != AppDir+"/hooks/helper.py "+AppDir+"/hooks/sync.py" {
		t.Errorf("files under %s: %v (want the script's folder)", AppDir, app)
	}
	if refs["Service/ns/Hook"] != "opzero.local/command/hook:test" || refs["Deployment//deployed-hook"] != "opzero.local/command/deployed-hook:test" {
		t.Errorf("refs %v", refs)
	}
	for _, u := range untouched {
		if !strings.Contains(resolved, u) {
			t.Errorf("changed:%s\nin:\n%s", u, resolved)
		}
	}
	for _, want := range []string{"image: opzero.local/command/hook:test", "image: opzero.local/command/deployed-hook:test",
		"image: example.com/sidecar:v1", "containerPort: 80", "value: b", "dev.opzero.dev/command"} {
		if !strings.Contains(resolved, want) {
			t.Errorf("no %q in:\n%s", want, resolved)
		}
	}
	if strings.Contains(resolved, "ghcr.io/example/hook") || strings.Contains(resolved, "example.com/hook:v1") {
		t.Errorf("an image not replaced:\n%s", resolved)
	}

	// A command whose arguments name no file of the build folder has no
	// image to build: an error naming it, nothing applied.
	bad := strings.Replace(manifest, `"hooks/sync.py", "--flag"`, `"-c", "print(1)"`, 1)
	if _, _, err := resolveCommands(context.Background(), dir, bad, load); err == nil || !strings.Contains(err.Error(), "Hook") {
		t.Errorf("a command without a script: %v", err)
	}
}

// TestResolveCommandsInterpreterImage: a Deployment hosted as
// Metacontroller's published hooks are (python:3.11 running a script from
// a ConfigMap), with no annotation, gets the image of the local python3
// (no script: the pod mounts the ConfigMap as published), run as root as
// the public image is, and a command naming the program's path in it; the
// ConfigMap and the mounts are untouched. An unrecognized image is left
// alone.
func TestResolveCommandsInterpreterImage(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 (Debian's python3)")
	}
	manifest := `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: published, namespace: metacontroller}
spec:
  template:
    spec:
      containers:
      - name: controller
        image: python:3.11
        command: [python, /hooks/sync.py]
        volumeMounts: [{name: hooks, mountPath: /hooks}]
      volumes: [{name: hooks, configMap: {name: published-5t2h}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: jsonnet, namespace: metacontroller}
spec:
  template:
    spec:
      containers:
      - {name: c, image: "metacontroller/jsonnetd:0.1", volumeMounts: [{name: hooks, mountPath: /hooks}]}
      volumes: [{name: hooks, configMap: {name: j}}]
`
	var got []image.Spec
	load := func(_ context.Context, specs ...image.Spec) ([]image.Built, error) {
		got = specs
		out := make([]image.Built, len(specs))
		for i, s := range specs {
			out[i].Ref = image.Registry + "/" + s.Name + ":test"
		}
		return out, nil
	}
	resolved, refs, err := resolveCommands(context.Background(), t.TempDir(), manifest, load)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "command/published" || got[0].User != "0:0" || !strings.HasPrefix(got[0].Path, "/usr/bin/python3") {
		t.Fatalf("images %+v", got)
	}
	for _, f := range got[0].Files {
		if strings.HasPrefix(f.Path, AppDir) {
			t.Errorf("the image holds %s: the script comes from the ConfigMap", f.Path)
		}
	}
	if refs["Deployment/metacontroller/published"] != "opzero.local/command/published:test" || len(refs) != 1 {
		t.Errorf("refs %v", refs)
	}
	for _, want := range []string{"image: opzero.local/command/published:test", "- " + got[0].Path + "\n", "- /hooks/sync.py", "mountPath: /hooks",
		"name: published-5t2h", `image: "metacontroller/jsonnetd:0.1"`} {
		if !strings.Contains(resolved, want) {
			t.Errorf("the manifest lacks %q:\n%s", want, resolved)
		}
	}
}
