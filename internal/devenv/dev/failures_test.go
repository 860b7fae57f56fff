package dev_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/devenv/dev"
	"github.com/opzero/opzero/testenv"
)

func TestReadManifestsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, content, want string }{
		{"bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a\n", "document 1: not valid YAML"},
		{"nokind.yaml", "metadata: {name: a}\n", "no apiVersion or kind"},
		{"noname.yaml", "apiVersion: v1\nkind: ConfigMap\n", "no metadata.name"},
		{"empty.yaml", "# nothing\n---\n", "no objects"},
	} {
		_, err := dev.ReadManifests(write(tc.name, tc.content), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error %v, want one naming the file and %q", tc.name, err, tc.want)
		}
	}
	if _, err := dev.ReadManifests(filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Error("a missing file: no error")
	}
	objs, err := dev.ReadManifests("-", strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n"))
	if err != nil || len(objs) != 2 || objs[1].GetName() != "b" {
		t.Fatalf("stdin with a List: %v, %d objects", err, len(objs))
	}
}

// TestStartRefuses: problems found before anything is applied are clear
// errors: an image that is not ko://, a port in use, a min-scale above
// max-scale, a timeoutSeconds that is not positive.
func TestStartRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane")
	}
	env := testenv.Get(t)
	ns := env.Namespace(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name   string
		mutate func(image, ann map[string]any, c map[string]any)
		port   int
		want   string
	}{
		{"registry image", func(_, _, c map[string]any) { c["image"] = "ghcr.io/you/op:v1" }, 0, `image "ghcr.io/you/op:v1" is not a ko:// image`},
		{"port in use", func(_, _, _ map[string]any) {}, busy.Addr().(*net.TCPAddr).Port, "is in use"},
		{"min-scale", func(_, ann, _ map[string]any) { ann["autoscaling.knative.dev/min-scale"] = "5" }, 0, "is above"},
		{"timeoutSeconds", func(tmpl, _, _ map[string]any) { tmpl["spec"].(map[string]any)["timeoutSeconds"] = int64(-1) }, 0, "timeoutSeconds -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := fixture(t, ns)
			for _, o := range objs {
				if o.GetKind() == "Service" {
					tmpl := o.Object["spec"].(map[string]any)["template"].(map[string]any)
					ann := tmpl["metadata"].(map[string]any)["annotations"].(map[string]any)
					c := tmpl["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
					tc.mutate(tmpl, ann, c)
				}
			}
			_, err := dev.Start(context.Background(), dev.Options{Kubeconfig: env.Kubeconfig, Objects: objs, Dir: t.TempDir(), CacheDir: cacheDir, Port: tc.port})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			t.Log(err)
		})
	}
}
