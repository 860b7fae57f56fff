package manifests_test

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/testenv"
)

// TestMain starts one control plane with Knative's CRDs and the
// ConfigWatcher CRD (for the tests that apply manifests and check RBAC).
//
// GOFLAGS builds the ConfigWatcher example with classic mode linked
// (examples/configwatcher/classic.go), so that the classic golden cases
// describe a binary that can run --mode=classic.
func TestMain(m *testing.M) {
	if err := os.Setenv("GOFLAGS", "-tags=opzero_classic"); err != nil {
		panic(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	os.Exit(testenv.Main(m, testenv.Options{KnativeCRDs: true, Scheme: scheme,
		CRDDirs: []string{"../../examples/configwatcher/config/crd", "../../config/crd"}}))
}
