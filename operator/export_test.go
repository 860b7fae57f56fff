package operator

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
)

// RequestsServed is how many HTTP requests the serverless engine has taken
// (0 in classic mode or before Register): tests wait on it without the
// engine's type appearing in the public API.
func RequestsServed(r *Runtime) int64 {
	if r.engine == nil {
		return 0
	}
	return r.engine.Stats().Requests.Load()
}

// NewGVMapper is the serverless client's RESTMapper, for its test.
var NewGVMapper = func(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) { return newGVMapper(cfg, hc) }
