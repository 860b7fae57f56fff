package dev

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestReadKustomization: -k, and -f of a folder that holds a
// kustomization.yaml, render it with kustomize (namespace, namePrefix and
// labels applied) instead of refusing kustomization.yaml as a manifest
// ("no apiVersion or kind"); a kustomization that does not build is an
// error naming its folder.
func TestReadKustomization(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kustomization.yaml": "namespace: ops\nnamePrefix: my-\nlabels:\n- pairs: {team: caches}\nresources:\n- sa.yaml\n",
		"sa.yaml":            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: operator}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, read := range map[string]func() error{
		"-k": func() error {
			objs, err := ReadKustomization(dir)
			return checkRendered(objs, err)
		},
		"-f": func() error {
			objs, err := ReadManifests(dir, nil)
			return checkRendered(objs, err)
		},
	} {
		if err := read(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources:\n- gone.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifests(dir, nil); err == nil || !strings.Contains(err.Error(), "kustomize build "+dir) || !strings.Contains(err.Error(), "gone.yaml") {
		t.Errorf("a kustomization that does not build: %v", err)
	}
	if _, err := ReadKustomization(filepath.Join(dir, "sa.yaml")); err == nil || !strings.Contains(err.Error(), "is not a folder") {
		t.Errorf("-k of a file: %v", err)
	}
}

// check: one ServiceAccount, as kustomize renders it.
func checkRendered(objs []*unstructured.Unstructured, err error) error {
	if err != nil {
		return err
	}
	if len(objs) != 1 {
		return fmt.Errorf("%d objects, want the ServiceAccount", len(objs))
	}
	o := objs[0]
	if o.GetName() != "my-operator" || o.GetNamespace() != "ops" || o.GetLabels()["team"] != "caches" {
		return fmt.Errorf("%s %s/%s labels %v: want kustomize's namespace, namePrefix and labels", o.GetKind(), o.GetNamespace(), o.GetName(), o.GetLabels())
	}
	return nil
}
