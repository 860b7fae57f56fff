//go:build opzero_serverless

package operator

import (
	"errors"

	"k8s.io/client-go/rest"
)

// ClassicAvailable reports whether this binary can run classic mode: false
// when built with -tags opzero_serverless.
const ClassicAvailable = false

// newManager refuses classic mode: this binary was built without the
// controller-runtime manager (-tags opzero_serverless), which keeps about a
// quarter of the binary, and of a running instance's RSS, out.
func newManager(*rest.Config, Options) (classicManager, error) {
	return nil, errors.New("classic mode is not in this binary: it was built with -tags opzero_serverless (serverless only); rebuild without the tag to run --mode=classic")
}
