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

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

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
	ref, _ := name.NewTag(built[0].Ref)
	img, err := tarball.ImageFromPath(tar, &ref)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	if err := untar(mutate.Extract(img), rootfs); err != nil {
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
	var out bytes.Buffer
	cmd := exec.Command(cf.Config.Entrypoint[0], cf.Config.Entrypoint[1:]...)
	cmd.Dir = cf.Config.WorkingDir
	cmd.Env = []string{fmt.Sprintf("PORT=%d", port), "HOOK_TOKEN=t"}
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	if cf.Config.User != image.NonRoot {
		t.Errorf("user %s", cf.Config.User)
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
			return false, fmt.Errorf("%w; output: %s", err, out.String())
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
