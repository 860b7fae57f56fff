package operator

import (
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"

	"github.com/opzero/opzero/operator/internal/seam"
)

// RequestsServed is how many HTTP requests the serverless engine has taken
// (0 in classic mode or before Register): tests wait on it without the
// engine's type appearing in the public API.
func RequestsServed(r *Runtime) int64 {
	var n int64
	for _, e := range r.engines {
		n += e.Stats().Requests.Load()
	}
	return n
}

// SetInformerStuckAfter shortens how long an informer may fail before
// classic mode's /healthz fails; it returns a func that restores it.
func SetInformerStuckAfter(d time.Duration) func() {
	old := seam.InformerStuckAfter
	seam.InformerStuckAfter = d
	return func() { seam.InformerStuckAfter = old }
}

// APIConfig is the rest.Config the serverless client uses, with
// Options.APITimeout applied.
func APIConfig(o Options, cfg *rest.Config) *rest.Config { return o.withTimeout(withRate(cfg)) }

// NewGVMapper is the serverless client's RESTMapper, for its test.
var NewGVMapper = func(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) { return newGVMapper(cfg, hc) }
