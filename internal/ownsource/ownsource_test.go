package ownsource

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRootIsThisCheckout: a test binary built from the checkout finds it.
func TestRootIsThisCheckout(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Fatalf("Root() = %s, want the checkout %s", root, want)
	}
	if !Own(ModulePath+"/cmd/opzero-metacontroller") || Own("example.com/x") || Own(ModulePath+"x/y") {
		t.Fatal("Own misjudges import paths")
	}
}
