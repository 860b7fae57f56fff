// Package resourceversion compares Kubernetes resourceVersions as
// k8s.io/apimachinery/pkg/util/resourceversion does (k8s.io v0.35 and
// later). It is a local copy because opzero supports k8s.io v0.33, which
// lacks that package; drop it for the upstream one when the oldest
// supported k8s.io has it.
//
// # Guarantees
//
// A resourceVersion is well formed when it is a decimal integer without
// leading zeros, as kube-apiserver's etcd storage writes them: two well
// formed ones compare as those integers. Any other string is an error
// (InvalidResourceVersion), never an order.
package resourceversion

import (
	"fmt"
	"strings"
)

// InvalidResourceVersion is the error for a resourceVersion that is not
// well formed.
type InvalidResourceVersion struct {
	rv string
}

func (i InvalidResourceVersion) Error() string {
	return fmt.Sprintf("resource version is not well formed: %s", i.rv)
}

// CompareResourceVersion returns -1, 0 or +1 as a is older than, the same
// as or newer than b; an error when either is not well formed.
func CompareResourceVersion(a, b string) (int, error) {
	if !wellFormed(a) {
		return 0, InvalidResourceVersion{rv: a}
	}
	if !wellFormed(b) {
		return 0, InvalidResourceVersion{rv: b}
	}
	switch {
	case len(a) < len(b):
		return -1, nil
	case len(a) > len(b):
		return 1, nil
	default:
		return strings.Compare(a, b), nil
	}
}

func wellFormed(s string) bool {
	if s == "" || s[0] == '0' {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
