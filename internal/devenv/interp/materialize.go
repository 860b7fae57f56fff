package interp

import (
	"encoding/base64"
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
// data decoded) and each emptyDir mount an empty folder.
func (h *Hook) MaterializeSecrets(dir string, read ConfigMapFunc, secret SecretFunc) (args []string, workDir string, err error) {
	var froms, tos []string
	for _, m := range h.Mounts {
		local := h.Local(dir, m)
		if m.EmptyDir {
			if err := os.MkdirAll(local, 0o777); err != nil {
				return nil, "", err
			}
			froms, tos = append(froms, path.Clean(m.MountPath)), append(tos, local)
			continue
		}
		what, name, rd := "ConfigMap", m.ConfigMap, read
		if m.Secret != "" {
			what, name, rd = "Secret", m.Secret, ConfigMapFunc(secret)
		}
		obj, err := rd(name)
		if err != nil {
			return nil, "", fmt.Errorf("%s %s mounted at %s: %w", what, name, m.MountPath, err)
		}
		files, err := m.files(obj)
		if err != nil {
			return nil, "", fmt.Errorf("%s %s: %w", what, name, err)
		}
		for rel, b := range files {
			p := local
			if rel != "" {
				p = filepath.Join(local, filepath.FromSlash(rel))
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, "", err
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				return nil, "", err
			}
		}
		froms, tos = append(froms, path.Clean(m.MountPath)), append(tos, local)
	}
	args = make([]string, len(h.Args))
	for i, a := range h.Args {
		args[i] = rewritePath(a, froms, tos)
	}
	return args, rewritePath(h.WorkingDir, froms, tos), nil
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
