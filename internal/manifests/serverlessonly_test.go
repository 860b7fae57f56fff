package manifests_test

import (
	"context"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/description"
	"github.com/opzero/opzero/internal/manifests"
)

// TestClassicRefusedForServerlessOnlyBinary: classic manifests for a binary
// that cannot run --mode=classic (its main does not import operator/classic)
// are refused, naming the import, instead of a Deployment that would fail
// to start.
func TestClassicRefusedForServerlessOnlyBinary(t *testing.T) {
	tg := &manifests.Target{Dir: ".", ImportPath: "example.com/op",
		Desc: description.Description{ServerlessOnly: true, Operators: []description.Controller{{Name: "op"}}}}
	_, err := manifests.Prepare(context.Background(), tg, manifests.Options{Mode: manifests.Classic})
	if err == nil || !strings.Contains(err.Error(), `import _ "github.com/opzero/opzero/operator/classic"`) {
		t.Fatalf("classic manifests of a serverless-only binary: %v, want a refusal naming the import", err)
	}
}
