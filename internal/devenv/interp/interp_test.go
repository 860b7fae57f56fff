package interp

import (
	"errors"
	"fmt"
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

// TestWriteMissing: a required volume whose object does not exist is a
// *MissingError naming it (a kubelet waits for it), an optional one is an
// empty folder (a kubelet starts without it, leaving out its missing
// keys), and a volume that names no object is an error of another kind.
func TestWriteMissing(t *testing.T) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: hook}
spec:
  template:
    spec:
      containers:
      - {name: c, image: "python:3.11", command: [python, /hooks/sync.py],
         volumeMounts: [{name: hooks, mountPath: /hooks}, {name: opt, mountPath: /opt/x}, {name: some, mountPath: /etc/some},
                        {name: certs, mountPath: /certs}]}
      volumes:
      - {name: hooks, configMap: {name: hooks}}
      - {name: opt, secret: {secretName: opt, optional: true}}
      - {name: some, configMap: {name: some, optional: true, items: [{key: a, path: a}, {key: gone, path: gone}]}}
      - {name: certs, secret: {secretName: certs}}
`), &u.Object); err != nil {
		t.Fatal(err)
	}
	h, err := Recognize(u)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*unstructured.Unstructured{"hooks": configMap(map[string]any{"sync.py": "pass"}), "some": configMap(map[string]any{"a": "A"})}
	read := func(name string) (*unstructured.Unstructured, error) {
		if o, ok := objs[name]; ok {
			return o, nil
		}
		return nil, fmt.Errorf("reading %s: %w", name, ErrNotFound)
	}
	dir := t.TempDir()
	err = h.Write(dir, read, read)
	var missing *MissingError
	if !errors.As(err, &missing) || !errors.Is(err, ErrNotFound) || *missing != (MissingError{Kind: "Secret", Name: "certs", Volume: "certs", MountPath: "/certs"}) {
		t.Fatalf("err %v, want the MissingError of Secret certs", err)
	}
	if want := "Secret certs mounted at /certs (volume certs) not found"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, "opt/x")); err != nil || !fi.IsDir() {
		t.Errorf("the optional Secret's mount is not an empty folder: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc/some/a")); err != nil || string(b) != "A" {
		t.Errorf("the optional ConfigMap's key a: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/some/gone")); err == nil {
		t.Error("an optional ConfigMap's missing key was written")
	}
	objs["certs"] = &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"tls.crt": "Q0VSVA=="}}}
	if err := h.Write(dir, read, read); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "certs/tls.crt")); err != nil || string(b) != "CERT" {
		t.Errorf("certs/tls.crt once the Secret exists: %q %v", b, err)
	}

	vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
	vols[3] = map[string]any{"name": "certs", "secret": map[string]any{}}
	_ = unstructured.SetNestedSlice(u.Object, vols, "spec", "template", "spec", "volumes")
	if h, err = Recognize(u); err != nil {
		t.Fatal(err)
	}
	err = h.Write(t.TempDir(), read, read)
	if err == nil || errors.As(err, &missing) || !strings.Contains(err.Error(), "volume certs mounted at /certs: no secret.secretName") {
		t.Fatalf("a secret volume with no secretName: %v", err)
	}
}
