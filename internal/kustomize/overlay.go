package kustomize

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// header starts every kustomization.yaml opzero writes: WriteKustomization
// rewrites only a file that starts with it.
const header = "# Written by opzero manifests, which rewrites it on every run: edit the command line, not this file.\n"

// CheckWritable refuses a folder whose kustomization file opzero did not
// write (it would be overwritten), or that has one under another name.
func CheckWritable(dir string) error {
	f := File(dir)
	if f == "" {
		return nil
	}
	if filepath.Base(f) != "kustomization.yaml" {
		return fmt.Errorf("%s: opzero manifests writes kustomization.yaml here, and kustomize refuses a folder with two kustomization files; remove it or write elsewhere", f)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte(header)) {
		return fmt.Errorf("%s was not written by opzero manifests; it would be overwritten: write the manifests to a folder of their own (e.g. config/serverless) and list it in your kustomization's resources", f)
	}
	return nil
}

// Ours says whether dir holds a kustomization.yaml that opzero wrote.
func Ours(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	return err == nil && bytes.HasPrefix(b, []byte(header))
}

// WriteKustomization writes dir/kustomization.yaml listing resources
// (files of dir, in the order given): a kustomization that `kustomize
// build` and `kubectl apply -k` render to exactly those files' objects. It
// refuses a kustomization file it did not write (CheckWritable).
func WriteKustomization(dir string, resources []string) error {
	if err := CheckWritable(dir); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, r := range resources {
		fmt.Fprintf(&b, "- %s\n", r)
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644)
}
