package adopt

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestCheckControllerRuntime: a version outside v0.21..v0.25 is refused
// with an error naming it and the range; one inside, or an unknown one, is
// not.
func TestCheckControllerRuntime(t *testing.T) {
	for _, tc := range []struct {
		v       string
		refused bool
	}{
		{"v0.20.4", true},
		{"v0.19.0", true},
		{"v0.21.0", false},
		{"v0.22.4", false},
		{"v0.23.3", false},
		{"v0.25.2", false},
		{"v0.21.1-0.20250601000000-abcdefabcdef", false},
		{"v0.26.0", true},
		{"v1.0.0", true},
		{"", false},
		{"(devel)", false},
	} {
		err := CheckControllerRuntime(tc.v)
		if (err != nil) != tc.refused {
			t.Errorf("CheckControllerRuntime(%q) = %v, want refused %v", tc.v, err, tc.refused)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), "controller-runtime "+tc.v+",") || !strings.Contains(err.Error(), "v0.21 to v0.25")) {
			t.Errorf("CheckControllerRuntime(%q) = %q: want the version and the range named", tc.v, err)
		}
	}
}

// TestAdoptRefusesAnotherControllerRuntime: Adopt, which runs when the
// project's main adds a controller (the error then fails Start), refuses a
// binary linking a controller-runtime outside the range, naming both.
func TestAdoptRefusesAnotherControllerRuntime(t *testing.T) {
	c, err := controller.NewUnmanaged("t", controller.Options{SkipNameValidation: ptr.To(true),
		Reconciler: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ v, want string }{
		{"v0.20.4", "this binary links sigs.k8s.io/controller-runtime v0.20.4, and this opzero adopts the controllers of controller-runtime v0.21 to v0.25"},
		{"v0.26.0", "controller-runtime v0.26.0, and this opzero adopts the controllers of controller-runtime v0.21 to v0.25"},
		{"v0.21.0", ""},
		{"v0.25.2", ""},
	} {
		linked = func() string { return tc.v }
		_, ok, err := Adopt(c, NewCache(nil, nil), nil)
		if !ok {
			t.Fatalf("%s: Adopt does not see a controller", tc.v)
		}
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Adopt with controller-runtime %s: %v, want %q", tc.v, err, tc.want)
		}
	}
	linked = LinkedControllerRuntime
}
