package manifests

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttachedWebhookMarkers: a +kubebuilder:webhook marker that runs
// into a declaration with no blank line (its doc comment, which
// controller-gen ignores for webhooks) is told apart from one that stands
// alone, with its file and line.
func TestAttachedWebhookMarkers(t *testing.T) {
	dir := t.TempDir()
	src := `package hooks

// +kubebuilder:webhook:path=/alone,mutating=false,failurePolicy=fail,sideEffects=None,groups=g,resources=r,verbs=create,versions=v1,name=alone.g,admissionReviewVersions=v1

// Alone is documented apart.
type Alone struct{}

// Attached is documented with its marker.
// +kubebuilder:webhook:path=/attached,mutating=false,failurePolicy=fail,sideEffects=None,groups=g,resources=r,verbs=create,versions=v1,name=attached.g,admissionReviewVersions=v1
type Attached struct{}
`
	if err := os.WriteFile(filepath.Join(dir, "hooks.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := scanWebhookSources(dir, []modulePackage{{ImportPath: "example.com/hooks", Dir: dir, GoFiles: []string{"hooks.go"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ws.MarkerPaths["/alone"] != "hooks.go" || ws.MarkerPaths["/attached"] != "hooks.go" {
		t.Errorf("marker paths %v", ws.MarkerPaths)
	}
	if _, ok := ws.Attached["/alone"]; ok || ws.Attached["/attached"] != "hooks.go:9" {
		t.Errorf("attached markers %v, want only /attached at hooks.go:9", ws.Attached)
	}
}
