package manifests_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/manifests"
)

// TestUnservedSourcesRefused: a controller with a source.Func and a custom
// source.Source (code of the project's own, which nothing runs at zero)
// gets no serverless manifests: the error names each source and the file
// and line of its code. --allow-unserved writes them with a warning each;
// classic runs them as the project does.
func TestUnservedSourcesRefused(t *testing.T) {
	t.Setenv("WIDGETS_UNSERVED", "1")
	wantNamed := []string{
		"widgets: its source.Func (testdata/widgets/controller/unserved.go:26) watches no kind",
		"widgets: its *controller.poller (testdata/widgets/controller/unserved.go:18) watches no kind",
	}
	objs, err := manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets"})
	if err == nil {
		t.Fatalf("Build wrote %d objects for a controller with unserved sources; want an error", len(objs))
	}
	for _, w := range append(wantNamed, "--allow-unserved", "nothing was written") {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error:\n%v\nwant it to contain %q", err, w)
		}
	}
	if objs != nil {
		t.Errorf("Build returned %d objects with its error", len(objs))
	}

	var warnings bytes.Buffer
	objs, err = manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets", AllowUnserved: true, Warnings: &warnings})
	if err != nil {
		t.Fatalf("with AllowUnserved: %v", err)
	}
	if !hasKind(objs, "Subscription") {
		t.Errorf("with AllowUnserved: no Subscription among %d objects", len(objs))
	}
	for _, w := range wantNamed {
		if !strings.Contains(warnings.String(), "warning: "+w) {
			t.Errorf("with AllowUnserved, warnings:\n%s\nwant one containing %q", warnings.String(), w)
		}
	}

	if _, err := manifests.Build(context.Background(), ".", "./testdata/widgets", manifests.Options{Namespace: "widgets", Mode: manifests.Classic}); err != nil {
		t.Errorf("classic: %v (it runs the sources as the project does)", err)
	}
}

func hasKind(objs []manifests.Object, kind string) bool {
	for _, o := range objs {
		if o.Kind() == kind {
			return true
		}
	}
	return false
}
