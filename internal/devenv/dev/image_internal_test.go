package dev

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestOwnImageOutsideModule: in a folder that is no Go module (a user's
// folder of Metacontroller YAML), opzero's own ko:// images are built from
// the opzero source the program came from; another import path still
// fails there, naming the folder.
func TestOwnImageOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds opzero-metacontroller")
	}
	own := t.TempDir()
	b := &builder{dir: t.TempDir(), buildDir: own}
	ctx := context.Background()
	argv, err := b.build(ctx, "github.com/opzero/opzero/cmd/opzero-metacontroller")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(argv[0]); err != nil || st.Size() == 0 {
		t.Fatalf("built %v: %v", argv, err)
	}
	_, err = b.build(ctx, "example.com/someone/else")
	if err == nil || !strings.Contains(err.Error(), own) {
		t.Fatalf("another import path in a folder with no module: %v, want a failure naming %s", err, own)
	}
}
