package adopt

import (
	"fmt"
	"runtime/debug"

	"golang.org/x/mod/semver"
)

// The controller-runtime releases whose controllers this opzero adopts:
// v0.21 (kubebuilder v4.6 to v4.8, k8s.io v0.33, Go 1.24) to v0.25. go.mod
// requires the oldest, so that a project on any of them keeps its own;
// hack/matrix.sh runs the adoption tests on v0.21, v0.23 and v0.25.
const (
	OldestControllerRuntime = "v0.21"
	NewestControllerRuntime = "v0.25"
)

// linked is LinkedControllerRuntime; tests pretend other versions.
var linked = LinkedControllerRuntime

// LinkedControllerRuntime is the controller-runtime version this binary
// was built with, from its build information: the replacement's version
// when go.mod replaces it, "" when unknown (a replacement by a folder, a
// binary without module information).
func LinkedControllerRuntime() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "sigs.k8s.io/controller-runtime" {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

// CheckControllerRuntime returns an error naming v and the supported range
// when v, a controller-runtime version, is outside it; nil for one in it
// and for an unknown one ("", not semver), which the shape checks of Adopt
// then judge.
func CheckControllerRuntime(v string) error {
	if !semver.IsValid(v) {
		return nil
	}
	mm := semver.MajorMinor(v)
	if semver.Compare(mm, OldestControllerRuntime) >= 0 && semver.Compare(mm, NewestControllerRuntime) <= 0 {
		return nil
	}
	return fmt.Errorf("this binary links sigs.k8s.io/controller-runtime %s, and this opzero adopts the controllers of controller-runtime %s to %s: "+
		"require one of those in go.mod, or run --mode=classic", v, OldestControllerRuntime, NewestControllerRuntime)
}
