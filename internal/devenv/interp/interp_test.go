package interp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestInterpreter(t *testing.T) {
	for img, want := range map[string]string{
		"python:3.11": "python3", "python": "python3", "docker.io/library/python:3-slim": "python3",
		"localhost:5000/python@sha256:abc": "python3", "node:20-alpine": "node", "gcr.io/x/node": "node",
		"python:2.7": "python2", "python:2": "python2", "python:2-slim": "python2", "python:3.12-bookworm": "python3",
		"metacontroller/jsonnetd:0.1": "", "pythonista:1": "", "busybox": "", "": "",
	} {
		if got := Interpreter(img); got != want {
			t.Errorf("Interpreter(%q) = %q, want %q", img, got, want)
		}
	}
}

func deployment(t *testing.T, container string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	doc := `apiVersion: apps/v1
kind: Deployment
metadata: {name: hook, namespace: metacontroller}
spec:
  template:
    spec:
      containers:
      - ` + container + `
      volumes:
      - name: hooks
        configMap: {name: hook-abc123}
      - name: other
        configMap: {name: other, items: [{key: a.json, path: conf/a.json}]}
`
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRecognize(t *testing.T) {
	mounts := `volumeMounts: [{name: hooks, mountPath: /hooks}]}`
	for _, tc := range []struct {
		name, container string
		prog            string
		args            []string
	}{
		{"python command", `{name: c, image: "python:3.11", command: [python, /hooks/sync.py], ` + mounts, "python3", []string{"/hooks/sync.py"}},
		{"python3 in args", `{name: c, image: python, args: [python3, -u, /hooks/sync.py], ` + mounts, "python3", []string{"-u", "/hooks/sync.py"}},
		{"node by path", `{name: c, image: "node:20", command: [/usr/local/bin/node, /hooks/sync.js], ` + mounts, "node", []string{"/hooks/sync.js"}},
		{"node entrypoint", `{name: c, image: "node:20", args: [/hooks/sync.js], ` + mounts, "node", []string{"/hooks/sync.js"}},
		{"shell", `{name: c, image: "python:3", command: [sh, -c, "python /hooks/sync.py"], ` + mounts, "", nil},
		{"jsonnet", `{name: c, image: "metacontroller/jsonnetd:0.1", ` + mounts, "", nil},
		{"no command", `{name: c, image: "python:3", ` + mounts, "", nil},
		{"sidecar", `{name: c, image: "python:3", command: [python, /hooks/sync.py]}
      - {name: s, image: "python:3", command: [python, /hooks/sync.py], ` + mounts, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Recognize(deployment(t, tc.container))
			if tc.prog == "" {
				if !errors.Is(err, ErrNotRecognized) || !strings.Contains(err.Error(), Annotation) {
					t.Fatalf("err %v, want ErrNotRecognized naming %s", err, Annotation)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Program != tc.prog || strings.Join(h.Args, " ") != strings.Join(tc.args, " ") {
				t.Fatalf("%s %q, want %s %q", h.Program, h.Args, tc.prog, tc.args)
			}
			if len(h.Mounts) != 1 || h.Mounts[0].ConfigMap != "hook-abc123" || h.Mounts[0].MountPath != "/hooks" {
				t.Fatalf("mounts %+v", h.Mounts)
			}
		})
	}
}

func configMap(data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data,
		"binaryData": map[string]any{"logo.bin": "AAE="}}}
}

// TestMaterialize: the ConfigMaps' files are written where the container
// would see them, under a local folder, and paths under the mountPaths in
// the arguments and working folder point there.
func TestMaterialize(t *testing.T) {
	u := deployment(t, `{name: c, image: "python:3.11", command: [python, /hooks/sync.py, --conf=/etc/x/conf/a.json, /hooksmith], workingDir: /hooks,
        volumeMounts: [{name: hooks, mountPath: /hooks}, {name: other, mountPath: /etc/x}, {name: hooks, mountPath: /lib/one.py, subPath: lib.py}]}`)
	h, err := Recognize(u)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	read := func(name string) (*unstructured.Unstructured, error) {
		switch name {
		case "hook-abc123":
			return configMap(map[string]any{"sync.py": "print('hi')", "lib.py": "X = 1"}), nil
		case "other":
			return configMap(map[string]any{"a.json": "{}", "b.json": "[]"}), nil
		}
		return nil, os.ErrNotExist
	}
	args, wd, err := h.Materialize(dir, read)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{dir + "/hooks/sync.py", "--conf=" + dir + "/etc/x/conf/a.json", "/hooksmith"}
	if strings.Join(args, " ") != strings.Join(want, " ") || wd != dir+"/hooks" {
		t.Fatalf("args %q working folder %s, want %q and %s/hooks", args, wd, want, dir)
	}
	for p, content := range map[string]string{"hooks/sync.py": "print('hi')", "hooks/logo.bin": "\x00\x01", "etc/x/conf/a.json": "{}", "lib/one.py": "X = 1"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || string(b) != content {
			t.Errorf("%s: %q %v, want %q", p, b, err, content)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/x/b.json")); err == nil {
		t.Error("a key items leaves out was written")
	}
	if _, _, err := h.Materialize(t.TempDir(), func(string) (*unstructured.Unstructured, error) { return nil, os.ErrNotExist }); err == nil ||
		!strings.Contains(err.Error(), "hook-abc123") {
		t.Fatalf("a missing ConfigMap: %v", err)
	}
}
