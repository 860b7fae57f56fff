package knative

import (
	"context"

	"github.com/opzero/opzero/internal/devenv/pinned"
)

// CRDs returns the files of Knative's Service (with Configuration, Revision
// and Route), ApiServerSource, PingSource, Broker and Trigger CRDs in the
// versions opzero pins, found by package pinned ($OPZERO_BIN_DIR's
// knative-crds folder, else the user cache, fetched there through the Go
// module proxy the first time). pinned.Resolver.CRDs honours --bin-dir.
func CRDs(ctx context.Context) ([]string, error) {
	return pinned.Resolver{}.CRDs(ctx)
}
