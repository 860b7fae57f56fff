package cluster

import (
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
