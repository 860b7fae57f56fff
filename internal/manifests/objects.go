package manifests

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/kustomize"
)

// Object is one generated manifest.
type Object struct {
	// File groups objects when written to a folder (crds.yaml, rbac.yaml, ...).
	File string
	// Obj is the object; Raw, if set, is its exact YAML (a generated CRD,
	// kept byte for byte as controller-gen writes it).
	Obj map[string]any
	Raw []byte
}

// The files objects are grouped in, in the order they are applied.
const (
	FileCRDs     = "crds.yaml"
	FileHub      = "hub.yaml" // --source=hub: the cluster's hub, the same for every operator
	FileRBAC     = "rbac.yaml"
	FileOperator = "operator.yaml"
	FileSources  = "sources.yaml"
	FileWakeup   = "wakeup-source.yaml"
	FileBroker   = "broker.yaml"
	FileWebhooks = "webhooks.yaml" // an adopted project's webhooks (--mode=webhooks)
)

var fileOrder = map[string]int{FileNamespace: -1, FileCRDs: 0, FileHub: 1, FileRBAC: 2, FileOperator: 3, FileSources: 4, FileWakeup: 5, FileBroker: 6, FileWebhooks: 7}

var kindOrder = map[string]int{"Namespace": 0, "CustomResourceDefinition": 1, "ServiceAccount": 2, "ClusterRole": 3, "ClusterRoleBinding": 4,
	"Role": 5, "RoleBinding": 6, "Deployment": 7, "PodDisruptionBudget": 7, "Service": 8, "ApiServerSource": 9, "PingSource": 10, "Subscription": 11,
	"Broker": 12, "Trigger": 13, "Secret": 6, "Issuer": 6, "Certificate": 6, "MutatingWebhookConfiguration": 14, "ValidatingWebhookConfiguration": 15}

// Kind, Name and Namespace of the object.
func (o Object) Kind() string { s, _ := o.Obj["kind"].(string); return s }

// Name of the object.
func (o Object) Name() string { return o.meta("name") }

// Namespace of the object ("" for cluster-scoped).
func (o Object) Namespace() string { return o.meta("namespace") }

func (o Object) meta(k string) string {
	m, _ := o.Obj["metadata"].(map[string]any)
	s, _ := m[k].(string)
	return s
}

// sortObjects orders objects by file, kind, namespace, name.
func sortObjects(objs []Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i], objs[j]
		if fileOrder[a.File] != fileOrder[b.File] {
			return fileOrder[a.File] < fileOrder[b.File]
		}
		if kindOrder[a.Kind()] != kindOrder[b.Kind()] {
			return kindOrder[a.Kind()] < kindOrder[b.Kind()]
		}
		if a.Namespace() != b.Namespace() {
			return a.Namespace() < b.Namespace()
		}
		return a.Name() < b.Name()
	})
}

// YAML is the object as one YAML document starting with "---".
func (o Object) YAML() ([]byte, error) {
	if o.Raw != nil {
		return o.Raw, nil
	}
	b, err := yaml.Marshal(o.Obj)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", o.Kind(), o.Name(), err)
	}
	return append([]byte("---\n"), b...), nil
}

// Stream writes all objects as one multi-document YAML stream.
func Stream(objs []Object) ([]byte, error) {
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := o.YAML()
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// Files groups objects into their files.
func Files(objs []Object) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, o := range objs {
		b, err := o.YAML()
		if err != nil {
			return nil, err
		}
		out[o.File] = append(out[o.File], b...)
	}
	return out, nil
}

// WriteDir writes the objects into dir, one file per group; files of groups
// that are empty now are removed, so a folder regenerated with other flags
// holds no stale objects.
func WriteDir(dir string, objs []Object) error {
	files, err := Files(objs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name := range fileOrder {
		p := filepath.Join(dir, name)
		if b, ok := files[name]; ok {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				return err
			}
		} else if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// WriteOverlay writes the objects as WriteDir does and a kustomization.yaml
// that lists the files in the order they apply, so that the folder is a
// kustomization (kustomize build, kubectl apply -k, opzero dev -k). A
// kustomization file opzero did not write is refused before anything is
// written.
//
// extra are more resources of the kustomization, after those files
// (folders of kustomizations, relative to dir: the Metacontroller
// controllers and hooks the operator serves).
func WriteOverlay(dir string, objs []Object, extra ...string) error {
	if err := kustomize.CheckWritable(dir); err != nil {
		return err
	}
	if err := WriteDir(dir, objs); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, o := range objs {
		seen[o.File] = true
	}
	files := slices.Collect(maps.Keys(seen))
	sort.Slice(files, func(i, j int) bool { return fileOrder[files[i]] < fileOrder[files[j]] })
	return kustomize.WriteKustomization(dir, append(files, extra...))
}

// object starts an object with apiVersion, kind and metadata.
func object(apiVersion, kind, namespace, name string, labels map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
}
