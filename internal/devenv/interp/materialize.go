package interp

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ConfigMapFunc reads a ConfigMap of the workload's namespace by name.
type ConfigMapFunc func(name string) (*unstructured.Unstructured, error)

// SecretFunc reads a Secret of the workload's namespace by name.
type SecretFunc func(name string) (*unstructured.Unstructured, error)

// Materialize writes the files of h's ConfigMap mounts under dir (each
// mountPath at dir/<mountPath>) and returns h's arguments and working
// folder with every path under a mountPath rewritten to its local copy.
// A Secret mount is an error (MaterializeSecrets reads them).
func (h *Hook) Materialize(dir string, read ConfigMapFunc) (args []string, workDir string, err error) {
	return h.MaterializeSecrets(dir, read, func(name string) (*unstructured.Unstructured, error) {
		return nil, fmt.Errorf("Secrets are not read here")
	})
}

// MaterializeSecrets is Materialize with Secret mounts written too (their
// data decoded) and each emptyDir mount an empty folder: Write, then Paths.
func (h *Hook) MaterializeSecrets(dir string, read ConfigMapFunc, secret SecretFunc) (args []string, workDir string, err error) {
	if err := h.Write(dir, read, secret); err != nil {
		return nil, "", err
	}
	args, workDir = h.Paths(dir)
	return args, workDir, nil
}

// ErrNotFound is what a ConfigMapFunc or SecretFunc returns (or wraps)
// for an object that does not exist.
var ErrNotFound = errors.New("not found")

// MissingError is a mount whose ConfigMap or Secret does not exist and is
// not optional. A kubelet does not fail such a pod: it stays
// ContainerCreating (an event "MountVolume.SetUp failed ... not found")
// and its container starts once the object exists, so a caller waits
// and writes the files again rather than give up. errors.Is(err,
// ErrNotFound) holds for it.
type MissingError struct {
	Kind              string // ConfigMap or Secret
	Name              string
	Volume, MountPath string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s %s mounted at %s (volume %s) not found", e.Kind, e.Name, e.MountPath, e.Volume)
}

// Is makes a MissingError an ErrNotFound.
func (e *MissingError) Is(target error) bool { return target == ErrNotFound }

// Write writes the files of h's mounts under dir (each mountPath at
// Local(dir, m)): a ConfigMap's data and binaryData, a Secret's data
// decoded, an empty folder for an emptyDir and for an optional volume
// whose object does not exist. A required volume whose object does not
// exist is a *MissingError (the files of the mounts before it written);
// a configMap or secret volume that names no object is an error.
func (h *Hook) Write(dir string, read ConfigMapFunc, secret SecretFunc) error {
	for _, m := range h.Mounts {
		local := h.Local(dir, m)
		if m.EmptyDir {
			if err := os.MkdirAll(local, 0o777); err != nil {
				return err
			}
			continue
		}
		what, name, rd := "ConfigMap", m.ConfigMap, read
		if m.Secret != "" || m.isSecret {
			what, name, rd = "Secret", m.Secret, ConfigMapFunc(secret)
		}
		if name == "" {
			field := map[string]string{"ConfigMap": "configMap.name", "Secret": "secret.secretName"}[what]
			return fmt.Errorf("volume %s mounted at %s: no %s", m.Volume, m.MountPath, field)
		}
		obj, err := rd(name)
		switch {
		case errors.Is(err, ErrNotFound) && m.Optional:
			if err := os.MkdirAll(local, 0o755); err != nil { // an empty volume, as a kubelet mounts it
				return err
			}
			continue
		case errors.Is(err, ErrNotFound):
			return &MissingError{Kind: what, Name: name, Volume: m.Volume, MountPath: m.MountPath}
		case err != nil:
			return fmt.Errorf("%s %s mounted at %s: %w", what, name, m.MountPath, err)
		}
		files, err := m.files(obj)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, name, err)
		}
		for rel, b := range files {
			p := local
			if rel != "" {
				p = filepath.Join(local, filepath.FromSlash(rel))
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				return err
			}
		}
		if len(files) == 0 { // an empty ConfigMap, or optional items none of which it has
			if err := os.MkdirAll(local, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// Paths are h's arguments and working folder with every path under a
// mountPath rewritten to its local copy under dir (where Write writes it).
func (h *Hook) Paths(dir string) (args []string, workDir string) {
	var froms, tos []string
	for _, m := range h.Mounts {
		froms, tos = append(froms, path.Clean(m.MountPath)), append(tos, h.Local(dir, m))
	}
	args = make([]string, len(h.Args))
	for i, a := range h.Args {
		args[i] = rewritePath(a, froms, tos)
	}
	return args, rewritePath(h.WorkingDir, froms, tos)
}

// Local is where Materialize writes mount m's files under dir.
func (h *Hook) Local(dir string, m Mount) string {
	return filepath.Join(dir, filepath.FromSlash(path.Clean("/"+m.MountPath)))
}

// NeedsPaths reports whether h mounts a Secret or an emptyDir: files a
// script reads at their mount paths rather than by an argument (its
// ConfigMaps' scripts are found by the rewritten arguments).
func (h *Hook) NeedsPaths() bool {
	for _, m := range h.Mounts {
		if m.Secret != "" || m.EmptyDir {
			return true
		}
	}
	return false
}

// files are the files a mount shows: path relative to the mountPath ("" for
// a subPath mount, whose mountPath is the file itself) -> content.
func (m Mount) files(cm *unstructured.Unstructured) (map[string][]byte, error) {
	all := map[string][]byte{}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	bin, _, _ := unstructured.NestedStringMap(cm.Object, "binaryData")
	if m.Secret != "" { // a Secret's data is base64, as binaryData
		data, bin = nil, data
	}
	for k, v := range data {
		all[k] = []byte(v)
	}
	for k, v := range bin {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("binaryData %s: %w", k, err)
		}
		all[k] = b
	}
	byPath := all
	if m.Items != nil {
		byPath = map[string][]byte{}
		for k, p := range m.Items {
			b, ok := all[k]
			if !ok && m.Optional { // a kubelet leaves out an optional volume's missing keys
				continue
			}
			if !ok {
				return nil, fmt.Errorf("no key %s (items)", k)
			}
			byPath[p] = b
		}
	}
	if m.SubPath == "" {
		return byPath, nil
	}
	out := map[string][]byte{}
	for p, b := range byPath {
		if p == m.SubPath {
			out[""] = b
		} else if rest, ok := strings.CutPrefix(p, m.SubPath+"/"); ok {
			out[rest] = b
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no file %s (subPath)", m.SubPath)
	}
	return out, nil
}

// rewritePath replaces a leading container path under one of froms (the
// longest that matches) with its local folder; anywhere in an argument
// such as --script=/hooks/sync.py too.
func rewritePath(a string, froms, tos []string) string {
	idx := make([]int, len(froms))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(x, y int) bool { return len(froms[idx[x]]) > len(froms[idx[y]]) })
	for _, i := range idx {
		from := froms[i]
		for _, pre := range []string{"", "="} {
			at := strings.Index(a, pre+from)
			if at < 0 || (pre == "" && at != 0) {
				continue
			}
			at += len(pre)
			rest := a[at+len(from):]
			if rest == "" || rest[0] == '/' {
				return a[:at] + tos[i] + rest
			}
		}
	}
	return a
}
