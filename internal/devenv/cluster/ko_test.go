package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestKoPackages: each ko:// image once, sorted; a path that extends
// another is its own package.
func TestKoPackages(t *testing.T) {
	m := "image: ko://example.com/a/cmd/b\n---\nimage: ko://example.com/a\nimage: ko://example.com/a/cmd/b\n"
	if got, want := KoPackages(m), []string{"example.com/a", "example.com/a/cmd/b"}; !slices.Equal(got, want) {
		t.Errorf("KoPackages = %v, want %v", got, want)
	}
	if got := KoImageName("github.com/Org/Op"); got != "github.com/org/op" {
		t.Errorf("KoImageName = %q", got)
	}
}

// TestSplitCRDs: CRDs and Namespaces first (kubectl maps every kind of an
// apply before it applies any), then the rest, in their order.
func TestSplitCRDs(t *testing.T) {
	m := `---
apiVersion: v1
kind: Namespace
metadata: {name: opzero-system}
---
apiVersion: opzero.dev/v1alpha1
kind: Subscription
metadata: {name: op}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: subscriptions.opzero.dev
---
# only a comment
`
	first, crds, rest := splitCRDs(m)
	if !slices.Equal(crds, []string{"crd/subscriptions.opzero.dev"}) {
		t.Errorf("crds = %v", crds)
	}
	if !strings.Contains(first, "kind: Namespace") || !strings.Contains(first, "kind: CustomResourceDefinition") || strings.Contains(first, "Subscription\n") {
		t.Errorf("first:\n%s", first)
	}
	if !strings.Contains(rest, "kind: Subscription") || strings.Contains(rest, "Namespace") {
		t.Errorf("rest:\n%s", rest)
	}
}

// TestReadKustomization: apply -k, and -f of a folder that holds a
// kustomization.yaml, read what kustomize renders, not the folder's files.
func TestReadKustomization(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kustomization.yaml": "namespace: ops\nresources:\n- sa.yaml\n",
		"sa.yaml":            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: operator}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, read := range map[string]func(string) (string, error){"-k": ReadKustomization, "-f": ReadManifests} {
		m, err := read(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(m, "namespace: ops") || strings.Contains(m, "resources:") {
			t.Errorf("%s: read\n%s\nwant the rendered ServiceAccount", name, m)
		}
	}
}
